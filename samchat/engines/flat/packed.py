"""Packed int4/int8 weights kept on disk: packed for this CPU and this forward at first load
(the native forward's tiles where it builds, torch's kernels' layout for the Python forward),
then memory-mapped by every later start.

Packing streams: the GGUF's tensors are read and converted a layer at a time, each tensor
written to the kept file as it is made (packfile.py), so that a load holds one layer, never
the whole model. A kept file is keyed by the model file's identity, the format, the forward,
the instruction set and the torch version, written atomically, and checked on reading: a
corrupt or foreign one is packed again, with a one-line notice."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import numpy as np
import numpy.typing as npt
import torch

from samchat.engines.flat import packfile
from samchat.engines.flat.exactness import REQUANTIZED
from samchat.engines.flat.forward import FlatModel
from samchat.engines.flat.gguf_weights import GGUFTensors, Tensor, dequantized, kind_of, open_gguf
from samchat.engines.flat.quant import (
    FORMATS,
    Embedding,
    is_tile_part,
    output_tiles,
    pack,
    pack8,
    tiles,
)
from samchat.engines.flat.shape import LlamaShape
from samchat.errors import ModelLoadError

Say = Callable[[str], None]
# Bumped when the packed layout or the quantization changes: older files are packed again.
LAYOUT = "8"
FORWARDS = ("native", "python")
# A load's peak memory: the process itself (torch, the tokenizer, the native forward) up to
# BASE_MEMORY, plus a factor of the GGUF's size to pack it (then map what it wrote), or of the
# kept file's to map it. The factors are the ones measured on the Llama-3.2 shapes with 15%
# added (docs/benchmarks.md, "Memory at first load"), so a load refused is one that would
# have come close.
BASE_MEMORY = 500_000_000
PACK_PER_BYTE = 1.78
MAP_PER_BYTE = 0.97
# Values of the widest tensors (the embedding, the output projection) decoded at once.
CHUNK_VALUES = 1 << 25
PROGRESS_S = 1.0  # the least time between two progress notices while packing
_LINEARS = (("qkv", ("q", "k", "v")), ("o", ("o",)), ("gu", ("gate", "up")), ("down", ("down",)))


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


def _key(identity: str, fmt: str, forward: str) -> dict[str, str]:
    return {
        "identity": identity,
        "format": fmt,
        "forward": forward,
        "capability": cpu_capability(),
        "torch": torch.__version__.split("+")[0],
        "layout": LAYOUT,
    }


def kept_path(cache_dir: Path, name: str, identity: str, fmt: str, forward: str) -> Path:
    key = _key(identity, fmt, forward)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:60]
    tag = fmt.replace("-", "_")  # one dash between the parts: see _drop_older
    return cache_dir / "packed" / f"{safe}-{tag}-{forward}-{digest[:16]}.flat"


def _vector(w: Tensor) -> torch.Tensor:
    return torch.from_numpy(np.array(dequantized(w), dtype=np.float32))  # a writable copy


def _put(sink: packfile.Sink, prefix: str, kind: int, held: dict[str, torch.Tensor]) -> None:
    sink.put(f"{prefix}.kind", torch.tensor([kind], dtype=torch.int64))
    for key, value in held.items():
        sink.put(f"{prefix}.{key}", value)


def _row_chunks(tensors: Mapping[str, Tensor], key: str, cols: int) -> Iterator[Tensor]:
    """Tensor `key` a few rows at a time (read so from a GGUF file)."""
    rows = max(16, CHUNK_VALUES // max(cols, 1) // 16 * 16)
    if isinstance(tensors, GGUFTensors):
        yield from tensors.row_chunks(key, rows)
        return
    w = tensors[key]
    for start in range(0, w.shape[0], rows):
        if isinstance(w, np.ndarray):
            yield w[start : start + rows]
        else:
            yield w.take_rows(np.arange(start, min(start + rows, w.shape[0])))


class _Rows:
    """Tensors written a chunk of their source's rows at a time: each is allocated at its
    first chunk, its first dimension in proportion to the rows (a tile's 16 rows, or one);
    the sink checks at the end that each was written whole."""

    def __init__(self, sink: packfile.Sink, rows: int) -> None:
        self.sink, self.rows = sink, rows
        self.regions: dict[str, packfile.Region] = {}

    def write(self, name: str, value: torch.Tensor, part_rows: int) -> None:
        region = self.regions.get(name)
        if region is None:
            first = value.shape[0] * self.rows // part_rows
            region = self.sink.allocate(name, value.dtype, (first, *value.shape[1:]))
            self.regions[name] = region
        region.write(value)


def _top(
    shape: LlamaShape,
    tensors: Mapping[str, Tensor],
    forward: str,
    requantize: bool,
    sink: packfile.Sink,
) -> None:
    """The embedding's rows and the output projection, a few rows at a time (the widest
    tensors: a tied projection is the embedding, decoded once for both)."""
    out = "out" if "out" in tensors else "embed"
    rows = _Rows(sink, shape.vocab)
    kinds: set[int] = set()

    def project(part: Tensor) -> None:
        n = part.shape[0]
        if forward == "native":
            kind, held = output_tiles(part, requantize)
            kinds.add(kind)
            for key, value in held.items():
                rows.write(f"out.{key}", value, n)
        else:  # int8 rows, each with its own scale
            q, scale = pack8([part])
            rows.write("out.w", q, n)
            rows.write("out.s", scale, n)

    for part in _row_chunks(tensors, "embed", shape.hidden):
        for key, value in Embedding.of(part).tensors().items():
            rows.write(key, value, part.shape[0])
        if out == "embed":
            project(part)
    if out == "out":
        for part in _row_chunks(tensors, "out", shape.hidden):
            project(part)
    if forward == "native":
        if len(kinds) != 1:
            raise ModelLoadError("the output projection's rows need tiles of different kinds")
        sink.put("out.kind", torch.tensor([kinds.pop()], dtype=torch.int64))


def convert(
    shape: LlamaShape,
    tensors: Mapping[str, Tensor],
    fmt: str,
    sink: packfile.Sink,
    forward: str = "native",
    requantize: bool = False,
    progress: Callable[[int], None] | None = None,
) -> None:
    """The flat engine's tensors for `forward`, put into `sink` as they are made: the
    embedding's own rows, the output projection, then each layer's norms and fused q/k/v and
    gate/up linears. The native forward reads each int4 linear as tiles of its own numbers
    (every part requantized to 4 bits only with `requantize`) and the output projection's
    tiles; the Python forward reads torch's kernels' layout of each (int8 for the output).
    progress(i): layer i is written."""
    if fmt not in FORMATS:
        raise ModelLoadError(f"unknown weight format {fmt!r}; use one of {', '.join(FORMATS)}")
    tiled = forward == "native" and fmt == "int4"  # else torch's kernels run the linears
    try:
        sink.put("norm", _vector(tensors["norm"]))
        if "rope_freqs" in tensors:  # Llama 3's: each rotary frequency divided by its factor
            sink.put("rope_freqs", _vector(tensors["rope_freqs"]))
        _top(shape, tensors, forward, requantize, sink)
        for i in range(shape.layers):
            _layer(shape, tensors, i, fmt, tiled, requantize, sink)
            if progress is not None:
                progress(i + 1)
    except KeyError as exc:
        raise ModelLoadError(f"the model has no tensor {exc}; it is not a LLaMA model") from exc


def _layer(
    shape: LlamaShape,
    tensors: Mapping[str, Tensor],
    i: int,
    fmt: str,
    tiled: bool,
    requantize: bool,
    sink: packfile.Sink,
) -> None:
    sink.put(f"{i}.attn_norm", _vector(tensors[f"{i}.attn_norm"]))
    sink.put(f"{i}.ffn_norm", _vector(tensors[f"{i}.ffn_norm"]))
    biases = [tensors.get(f"{i}.{p}_bias") for p in ("q", "k", "v")]
    if any(b is not None for b in biases):  # qwen2's; a missing one adds zeros
        widths = (shape.heads, shape.kv_heads, shape.kv_heads)
        sink.put(
            f"{i}.qkv.b",
            torch.cat(
                [
                    _vector(b) if b is not None else torch.zeros(h * shape.head_dim)
                    for b, h in zip(biases, widths, strict=True)
                ]
            ),
        )
    for norm in ("q_norm", "k_norm"):  # qwen3's, per head before the rotary
        if f"{i}.{norm}" in tensors:
            sink.put(f"{i}.{norm}", _vector(tensors[f"{i}.{norm}"]))
    for name, parts in _LINEARS:
        ws = [tensors[f"{i}.{p}"] for p in parts]
        if tiled:  # the native forward's tiles of the file's own numbers
            _put(sink, f"{i}.{name}", *tiles(ws, requantize))
        else:
            w, s = pack(fmt, ws)
            sink.put(f"{i}.{name}.w", w)
            sink.put(f"{i}.{name}.s", s)


def held_types(tensors: Mapping[str, Tensor]) -> str:
    """The GGUF types of a model's matrices, as describe() names them ("Q4_K, Q6_K")."""
    if isinstance(tensors, GGUFTensors):
        return ", ".join(sorted(tensors.kinds()))
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


def _read_source(source: Path, requantize: bool) -> tuple[LlamaShape, Mapping[str, Tensor]]:
    return hf_tensors(source) if source.is_dir() else open_gguf(source, requantize)


def _mapped(path: Path, key: dict[str, str], kernels: str, about: str) -> FlatModel:
    """The kept model, memory-mapped (its tiles read into huge pages where that is cheap);
    ValueError when the file is not what `key` names."""
    meta, tensors = packfile.read(path, huge=is_tile_part)
    for k, v in key.items():
        if meta.get(k) != v:
            raise ValueError(f"it was packed for another {k}")
    shape = LlamaShape.from_json(meta["shape"])
    held = meta.get("held", "")
    return FlatModel(kernels, shape, tensors, f"{about} {path.name} ({held})", key["forward"])


def _kept(cache_dir: Path, name: str, identity: str, fmt: str) -> Path | None:
    """The kept packing of this model in `fmt`, for the forward that would run here (the
    other's where only it is kept)."""
    from samchat.engines.flat.native import expected_forward

    first = expected_forward(cache_dir)
    for forward in sorted(FORWARDS, key=lambda f: f != first):
        path = kept_path(cache_dir, name, identity, fmt, forward)
        if path.is_file():
            return path
    return None


def load_need(source: Path, name: str, fmt: str, cache_dir: Path | None) -> tuple[int, str] | None:
    """The memory the load of `source` in `fmt` takes at its peak, estimated before loading,
    and what it does ("pack" or "map"); None where it is not estimated (a directory).

    Packing holds one layer's tensors, or a few rows of the embedding and output projection,
    at a time, then maps the file it wrote (about twice the GGUF): that mapping is its peak,
    so it grows with the GGUF's size. Mapping a kept file holds the pages the forward reads:
    the whole file but the embedding's rows not looked up."""
    if cache_dir is not None:
        kept = _kept(cache_dir, name, file_identity(source), fmt)
        if kept is not None:
            return BASE_MEMORY + int(MAP_PER_BYTE * kept.stat().st_size), "map"
    if source.is_dir():
        return None
    return BASE_MEMORY + int(PACK_PER_BYTE * source.stat().st_size), "pack"


def load_flat(
    source: Path, name: str, fmt: str, cache_dir: Path | None, say: Say | None = None
) -> FlatModel:
    """The model at `source` (a GGUF file or a Hugging Face directory) in `fmt`: mapped from
    the kept packed file in cache_dir, or packed now (and kept, when there is a cache_dir),
    for the native forward where it builds (built first: the kept file holds the layout of
    the forward that reads it), else for the Python one."""
    from samchat.engines.flat.native import build

    notice = say or (lambda _: None)
    why = build.load(cache_dir, notice)
    model = _packed(source, name, fmt, cache_dir, notice, "python" if why else "native")
    if model.forward == "native":
        why = model.go_native(cache_dir, notice)
        if why is not None:  # not expected: native_refusal said it would run
            model = _packed(source, name, fmt, cache_dir, notice, "python")
    elif why is None:
        from samchat.engines.flat.native.forward import native_refusal

        why = native_refusal(model.shape)
    if why is not None:
        notice(f"the native forward is not available ({why}); using the Python forward")
    return model


def _packed(
    source: Path, name: str, fmt: str, cache_dir: Path | None, notice: Say, forward: str
) -> FlatModel:
    from samchat.engines.flat.native.forward import native_refusal

    identity = file_identity(source)
    # The kernels' format: int4-requantized is int4 tiles of every linear, asked for.
    kernels = "int4" if fmt == REQUANTIZED else fmt
    shape: LlamaShape | None = None
    raw: Mapping[str, Tensor] = {}
    for attempt in (0, 1):
        path = None if cache_dir is None else kept_path(cache_dir, name, identity, fmt, forward)
        if path is not None and path.is_file():
            try:
                return _mapped(path, _key(identity, fmt, forward), kernels, "mapped")
            except Exception as exc:  # a damaged file raises many types: all mean "unusable"
                notice(f"the packed weights {path} are unusable ({exc}); packing them again")
        if shape is None:
            # int8 and int4-requantized requantize as asked; int4 holds the file's own numbers.
            shape, raw = _read_source(source, requantize=fmt != "int4")
        if attempt or forward != "native" or native_refusal(shape) is None:
            break
        forward = "python"  # a shape the native forward does not take: see load_flat
    assert shape is not None
    held = f"{held_types(raw)} as in the file" if fmt == "int4" else f"{fmt} from {held_types(raw)}"
    key = _key(identity, fmt, forward)
    notice(f"packing {name} as {fmt} for this CPU ({cpu_capability()}; once)")
    progress = _progress(notice, name, shape.layers)
    requantize = fmt == REQUANTIZED
    if path is not None:
        try:
            with packfile.PackWriter(path) as writer:
                convert(shape, raw, kernels, writer, forward, requantize, progress)
                writer.finish({**key, "shape": shape.to_json(), "held": held})
        except OSError as exc:
            notice(f"could not keep the packed weights in {path.parent}: {exc}")
        else:
            del raw
            _drop_older(path)
            _trim()
            return _mapped(path, key, kernels, "packed into")
    sink = packfile.MemorySink()
    convert(shape, raw, kernels, sink, forward, requantize, progress)
    return FlatModel(kernels, shape, dict(sink), f"packed in memory ({held})", forward)


def _trim() -> None:
    """Hands the heap's freed pages back to the system (glibc keeps them otherwise), so that
    the packing's scratch is gone before the mapped weights come in."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _progress(notice: Say, name: str, layers: int) -> Callable[[int], None]:
    """Packing's notices: the layers written, at most one a PROGRESS_S, and the last."""
    last = time.monotonic()

    def done(i: int) -> None:
        nonlocal last
        now = time.monotonic()
        if i == layers or now - last >= PROGRESS_S:
            last = now
            notice(f"packing {name}: layer {i} of {layers}")

    return done


def _drop_older(path: Path) -> None:
    """Removes the same model's packings for this forward under other keys (an older layout,
    torch or file), and files of the layouts before this one: nothing reads them again, and
    each is the model's size."""
    stem = path.name.rsplit("-", 1)[0]  # name-format-forward
    older = [*path.parent.glob(f"{stem}-*.flat")]
    older += path.parent.glob(f"{stem.rsplit('-', 1)[0]}-*.safetensors")
    for old in older:
        if old != path:
            with contextlib.suppress(OSError):
                old.unlink()
