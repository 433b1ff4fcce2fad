"""Packed int4/int8 weights kept on disk: packed for this CPU at first load (the kernel's layout
depends on the instruction set torch uses), then memory-mapped by every later start.

A kept file is keyed by the model file's identity, the format, the instruction set and the
torch version, written atomically, and checked on reading: a corrupt or foreign one is packed
again, with a one-line notice."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from samchat.engines.flat.exactness import REQUANTIZED
from samchat.engines.flat.forward import FlatModel
from samchat.engines.flat.gguf_weights import Tensor, dequantized, kind_of, read_gguf
from samchat.engines.flat.quant import FORMATS, Embedding, output_tiles, pack, pack8, tiles
from samchat.engines.flat.shape import LlamaShape
from samchat.errors import ModelLoadError

Say = Callable[[str], None]
# Bumped when the packed layout or the quantization changes: older files are packed again.
LAYOUT = "7"
ALIGN = 64
# A load's peak memory: the process itself (torch, the tokenizer, the native forward) up to
# BASE_MEMORY, plus a factor of the GGUF's size to pack it, or of the kept file's to map it.
# The factors are the ones measured on the 1B shape with 15% added (docs/benchmarks.md,
# "Memory at first load"), so a load refused is one that would have come close.
BASE_MEMORY = 1_500_000_000
PACK_PER_BYTE = 14.3
MAP_PER_BYTE = 1.8


def cpu_capability() -> str:
    return str(torch.backends.cpu.get_cpu_capability())


def file_identity(path: Path) -> str:
    """A model file or directory by where it is, its size and mtime (as converted models are
    keyed): a changed file is packed again."""
    parts = [str(path.resolve())]
    files = [*sorted(path.glob("*.safetensors")), path / "config.json"] if path.is_dir() else [path]
    for f in files:
        stat = f.stat()
        parts.append(f"{f.name}|{stat.st_size}|{stat.st_mtime_ns}")
    return "|".join(parts)


def _key(identity: str, fmt: str) -> dict[str, str]:
    return {
        "identity": identity,
        "format": fmt,
        "capability": cpu_capability(),
        "torch": torch.__version__.split("+")[0],
        "layout": LAYOUT,
    }


def kept_path(cache_dir: Path, name: str, identity: str, fmt: str) -> Path:
    digest = hashlib.sha256(json.dumps(_key(identity, fmt), sort_keys=True).encode()).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
    tag = fmt.replace("-", "_")  # one dash before the digest: see _drop_older
    return cache_dir / "packed" / f"{safe}-{tag}-{digest[:16]}.safetensors"


def convert(
    shape: LlamaShape, tensors: dict[str, Tensor], fmt: str, requantize: bool = False
) -> dict[str, torch.Tensor]:
    """The flat engine's tensors: fused q/k/v and gate/up, each linear packed in `fmt` for
    torch's kernels (the Python forward) and as tiles of its own numbers for the native one
    (every part requantized to 4 bits only with `requantize`), the output projection's tiles
    and int8, and the embedding's own rows."""
    if fmt not in FORMATS:
        raise ModelLoadError(f"unknown weight format {fmt!r}; use one of {', '.join(FORMATS)}")
    out: dict[str, torch.Tensor] = {}

    def vector(w: Tensor) -> torch.Tensor:
        return torch.from_numpy(np.array(dequantized(w), dtype=np.float32))  # a writable copy

    def put(prefix: str, kind: int, held: dict[str, torch.Tensor]) -> None:
        out[f"{prefix}.kind"] = torch.tensor([kind], dtype=torch.int64)
        for key, value in held.items():
            out[f"{prefix}.{key}"] = value

    try:
        for i in range(shape.layers):
            for name, parts in (
                ("qkv", ("q", "k", "v")),
                ("o", ("o",)),
                ("gu", ("gate", "up")),
                ("down", ("down",)),
            ):
                ws = [tensors[f"{i}.{p}"] for p in parts]
                out[f"{i}.{name}.w"], out[f"{i}.{name}.s"] = pack(fmt, ws)
                if fmt == "int4":  # the native forward's tiles of the same numbers
                    put(f"{i}.{name}", *tiles(ws, requantize))
            out[f"{i}.attn_norm"] = vector(tensors[f"{i}.attn_norm"])
            out[f"{i}.ffn_norm"] = vector(tensors[f"{i}.ffn_norm"])
            biases = [tensors.get(f"{i}.{p}_bias") for p in ("q", "k", "v")]
            if any(b is not None for b in biases):  # qwen2's; a missing one adds zeros
                widths = (shape.heads, shape.kv_heads, shape.kv_heads)
                out[f"{i}.qkv.b"] = torch.cat(
                    [
                        vector(b) if b is not None else torch.zeros(h * shape.head_dim)
                        for b, h in zip(biases, widths, strict=True)
                    ]
                )
            for norm in ("q_norm", "k_norm"):  # qwen3's, per head before the rotary
                if f"{i}.{norm}" in tensors:
                    out[f"{i}.{norm}"] = vector(tensors[f"{i}.{norm}"])
    except KeyError as exc:
        raise ModelLoadError(f"the model has no tensor {exc}; it is not a LLaMA model") from exc
    out["norm"] = vector(tensors["norm"])
    if "rope_freqs" in tensors:  # Llama 3's: each rotary frequency divided by its factor
        out["rope_freqs"] = vector(tensors["rope_freqs"])
    out.update(Embedding.of(tensors["embed"]).tensors())
    projection = tensors.get("out", tensors["embed"])
    out["out.w"], out["out.s"] = pack8([projection])
    put("out", *output_tiles(projection, requantize))
    return out


def held_types(tensors: dict[str, Tensor]) -> str:
    """The GGUF types of a model's matrices, as describe() names them ("Q4_K, Q6_K")."""
    kinds = {kind_of(w) for w in tensors.values() if not isinstance(w, np.ndarray) or w.ndim > 1}
    return ", ".join(sorted(kinds))


def hf_tensors(directory: Path) -> tuple[LlamaShape, dict[str, Tensor]]:
    """A Hugging Face LLaMA checkpoint's weights as float32, named as gguf_weights names them."""
    from safetensors.numpy import load_file
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(directory, local_files_only=True)
    shape = LlamaShape.from_hf(config)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{directory} has no safetensors weights for --dtype int4/int8")
    raw: dict[str, npt.NDArray[np.generic]] = {}
    for f in files:
        raw.update(load_file(str(f)))
    names = {
        "self_attn.q_proj": "q",
        "self_attn.k_proj": "k",
        "self_attn.v_proj": "v",
        "self_attn.o_proj": "o",
        "mlp.gate_proj": "gate",
        "mlp.up_proj": "up",
        "mlp.down_proj": "down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    out: dict[str, Tensor] = {}
    for key, value in raw.items():
        arr = np.asarray(value, dtype=np.float32)
        base = key.removeprefix("model.").removesuffix(".weight")
        if base == "embed_tokens":
            out["embed"] = arr
        elif base == "norm":
            out["norm"] = arr
        elif key == "lm_head.weight":
            out["out"] = arr
        elif base.startswith("layers."):
            _, layer, rest = base.split(".", 2)
            if rest in names:
                out[f"{layer}.{names[rest]}"] = arr
    if getattr(config, "tie_word_embeddings", True):
        out.pop("out", None)
    return shape, out


def _read_source(source: Path, requantize: bool) -> tuple[LlamaShape, dict[str, Tensor]]:
    return hf_tensors(source) if source.is_dir() else read_gguf(source, requantize)


def _serialize(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> bytes:
    """The safetensors bytes, the header padded so that the tensors' data starts 64-byte
    aligned: the kernels load packed weights with aligned vector loads."""
    from safetensors.torch import save

    ordered = {k: v.contiguous() for k, v in tensors.items()}
    for pad in range(0, ALIGN, 8):
        data = save(ordered, metadata={**meta, "pad": " " * pad})
        if (8 + int.from_bytes(data[:8], "little")) % ALIGN == 0:
            return data
    return data


def _write(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".packing-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_serialize(tensors, meta))
        os.replace(tmp, path)  # atomic: a half-written file is never taken for a whole one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _aligned(t: torch.Tensor) -> torch.Tensor:
    """A mapped tensor as the kernels take it (a copy where it does not start aligned)."""
    return t if t.data_ptr() % ALIGN == 0 else t.clone()


def _read(path: Path, key: dict[str, str]) -> tuple[LlamaShape, dict[str, torch.Tensor], str]:
    """The kept tensors, memory-mapped, and the types they hold; ValueError when the file is
    not what `key` names."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    for k, v in key.items():
        if meta.get(k) != v:
            raise ValueError(f"it was packed for another {k}")
    shape = LlamaShape.from_json(meta["shape"])
    return shape, {k: _aligned(v) for k, v in load_file(str(path)).items()}, meta.get("held", "")


def load_need(source: Path, name: str, fmt: str, cache_dir: Path | None) -> tuple[int, str] | None:
    """The memory the load of `source` in `fmt` takes at its peak, estimated before loading,
    and what it does ("pack" or "map"); None where it is not estimated (a directory).

    Packing holds the GGUF's pages, float32 copies of its widest tensors, the packed tensors
    and their serialized copy at once: its peak grows with the GGUF's tensors (the file's size:
    its metadata is a few MB). Mapping a kept packed file reads it and aligns its tensors."""
    if cache_dir is not None:
        kept = kept_path(cache_dir, name, file_identity(source), fmt)
        if kept.is_file():
            return BASE_MEMORY + int(MAP_PER_BYTE * kept.stat().st_size), "map"
    if source.is_dir():
        return None
    return BASE_MEMORY + int(PACK_PER_BYTE * source.stat().st_size), "pack"


def load_flat(
    source: Path, name: str, fmt: str, cache_dir: Path | None, say: Say | None = None
) -> FlatModel:
    """The model at `source` (a GGUF file or a Hugging Face directory) in `fmt`: mapped from
    the kept packed file in cache_dir, or packed now (and kept, when there is a cache_dir),
    on the native forward where it builds."""
    notice = say or (lambda _: None)
    model = _packed(source, name, fmt, cache_dir, notice)
    why = model.go_native(cache_dir, notice)
    if why is not None:
        notice(f"the native forward is not available ({why}); using the Python forward")
    return model


def _packed(source: Path, name: str, fmt: str, cache_dir: Path | None, notice: Say) -> FlatModel:
    identity = file_identity(source)
    key = _key(identity, fmt)
    path = kept_path(cache_dir, name, identity, fmt) if cache_dir is not None else None
    # The kernels' format: int4-requantized is int4 tiles of every linear, asked for.
    kernels = "int4" if fmt == REQUANTIZED else fmt
    if path is not None and path.is_file():
        try:
            shape, tensors, held = _read(path, key)
            return FlatModel(kernels, shape, tensors, f"mapped {path.name} ({held})")
        except Exception as exc:  # safetensors raises several types: all mean "not usable"
            notice(f"the packed weights {path} are unusable ({exc}); packing them again")
    notice(f"packing {name} as {fmt} for this CPU ({cpu_capability()}; once)")
    # int8 and int4-requantized requantize as asked; int4 holds the file's own numbers.
    shape, raw = _read_source(source, requantize=fmt != "int4")
    held = f"{held_types(raw)} as in the file" if fmt == "int4" else f"{fmt} from {held_types(raw)}"
    tensors = convert(shape, raw, kernels, requantize=fmt == REQUANTIZED)
    del raw
    if path is None:
        return FlatModel(kernels, shape, tensors, f"packed in memory ({held})")
    try:
        _write(path, tensors, {**key, "shape": shape.to_json(), "held": held})
    except OSError as exc:
        notice(f"could not keep the packed weights in {path.parent}: {exc}")
        return FlatModel(kernels, shape, tensors, f"packed in memory ({held})")
    _drop_older(path)
    shape, mapped, held = _read(path, key)
    return FlatModel(kernels, shape, mapped, f"packed into {path.name} ({held})")


def _drop_older(path: Path) -> None:
    """Removes the same model's packings under other keys (an older layout, torch or file):
    nothing reads them again, and each is the model's size."""
    stem = path.name.rsplit("-", 1)[0]
    for old in path.parent.glob(f"{stem}-*.safetensors"):
        if old != path:
            with contextlib.suppress(OSError):
                old.unlink()
