"""A llama, qwen2 or qwen3 GGUF file's tensors as the lean int4/int8 forward takes them: 4-bit
blocks (Q4_0, Q4_1) keep their own quantized numbers, Q8_0 keeps its bytes (the embedding reads its
exact rows), anything else is dequantized to float32 (and quantized again by quant.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from samchat.engines.torch.shape import LlamaShape
from samchat.errors import InexactError, ModelLoadError

BLOCK = 32  # values per block, for every GGUF type read here


@dataclass
class Blocks4:
    """Group-32 4-bit weights (rows, cols): value = (q - 8) * scale + zero, q in 0..15."""

    q: np.ndarray[Any, np.dtype[np.uint8]]
    scale: np.ndarray[Any, np.dtype[np.float32]]  # (rows, cols / 32)
    zero: np.ndarray[Any, np.dtype[np.float32]]

    def dequantize(self) -> np.ndarray[Any, np.dtype[np.float32]]:
        rows, cols = self.q.shape
        q = self.q.reshape(rows, cols // BLOCK, BLOCK).astype(np.float32) - 8.0
        w = q * self.scale[..., None] + self.zero[..., None]
        return w.reshape(rows, cols).astype(np.float32)

    def take_rows(self, order: np.ndarray[Any, np.dtype[np.intp]]) -> Blocks4:
        return Blocks4(self.q[order], self.scale[order], self.zero[order])


@dataclass
class Blocks8:
    """Q8_0 rows: value = q * d, q int8, one d per 32 values."""

    q: np.ndarray[Any, np.dtype[np.int8]]
    d: np.ndarray[Any, np.dtype[np.float32]]

    def dequantize(self) -> np.ndarray[Any, np.dtype[np.float32]]:
        rows, cols = self.q.shape
        q = self.q.reshape(rows, cols // BLOCK, BLOCK).astype(np.float32)
        return (q * self.d[..., None]).reshape(rows, cols).astype(np.float32)


Tensor = Blocks4 | Blocks8 | np.ndarray[Any, np.dtype[np.float32]]


def _blocks(raw: np.ndarray[Any, Any], rows: int, size: int) -> np.ndarray[Any, Any]:
    return np.ascontiguousarray(raw).view(np.uint8).reshape(rows, -1, size)


def _f16(blocks: np.ndarray[Any, Any], at: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    return (
        np.ascontiguousarray(blocks[..., at : at + 2]).view(np.float16)[..., 0].astype(np.float32)
    )


def _nibbles(qs: np.ndarray[Any, Any]) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """A 4-bit block's 32 values in order: the low nibbles are values 0-15, the high 16-31."""
    out: np.ndarray[Any, np.dtype[np.uint8]] = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    return out


def decode(tensor: Any) -> Tensor:
    """One GGUFReader tensor, (rows, cols) as torch lays a linear's weight out."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize

    kind = T(tensor.tensor_type)
    shape = [int(n) for n in reversed(tensor.shape)]  # GGUF lists the fastest dimension first
    rows = shape[0] if len(shape) > 1 else 1
    cols = shape[-1]
    raw = tensor.data
    if kind in (T.Q4_0, T.Q4_1):
        size = 18 if kind == T.Q4_0 else 20
        b = _blocks(raw, rows, size)
        d = _f16(b, 0)
        q = _nibbles(b[..., size - 16 :]).reshape(rows, cols)
        # Q4_0: d * (q - 8); Q4_1: d * q + m = d * (q - 8) + (m + 8d).
        zero = np.zeros_like(d) if kind == T.Q4_0 else _f16(b, 2) + 8.0 * d
        return Blocks4(np.ascontiguousarray(q), d, zero.astype(np.float32))
    if kind == T.Q8_0:
        b = _blocks(raw, rows, 34)
        q8 = np.ascontiguousarray(b[..., 2:]).view(np.int8).reshape(rows, cols)
        return Blocks8(q8, _f16(b, 0))
    values = np.asarray(dequantize(np.asarray(raw), kind), dtype=np.float32)
    return values.reshape(shape) if len(shape) > 1 else values.reshape(cols)


def _unpermute(w: Tensor, heads: int) -> Tensor:
    """llama.cpp's converter reorders q and k rows for its interleaved rotary pairs; back to
    the Hugging Face order (halves), which the forward's rotary tables follow."""
    rows = w.q.shape[0] if isinstance(w, Blocks4 | Blocks8) else w.shape[0]
    order = np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(rows)
    if isinstance(w, Blocks4):
        return w.take_rows(order)
    if isinstance(w, Blocks8):
        return Blocks8(w.q[order], w.d[order])
    return np.ascontiguousarray(w[order])


def _field(reader: Any, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise ModelLoadError(f"the GGUF file has no {key}; it is not a LLaMA-family model")
        return default
    return field.contents()


def _uniform(reader: Any, key: str, default: Any = None) -> int:
    """A count that may be given per layer: one value for every layer, or InexactError."""
    value = _field(reader, key, default)
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise InexactError(f"{key} differs between layers, which the flat engine does not run")
        value = value[0]
    return int(value)


# The architectures the flat engine computes, and whether llama.cpp rotates their q and k in
# interleaved pairs (llama: its converter reordered the rows for that, undone here) or in
# halves (NEOX, as the forward does).
FAMILIES = {"llama": True, "qwen2": False, "qwen3": False}

# A layer's tensors, by the (part, kind) of their GGUF names, as shape.py names them.
_NAMES = {
    ("attn_norm", "weight"): "attn_norm",
    ("ffn_norm", "weight"): "ffn_norm",
    ("attn_q", "weight"): "q",
    ("attn_k", "weight"): "k",
    ("attn_v", "weight"): "v",
    ("attn_q", "bias"): "q_bias",
    ("attn_k", "bias"): "k_bias",
    ("attn_v", "bias"): "v_bias",
    ("attn_output", "weight"): "o",
    ("ffn_gate", "weight"): "gate",
    ("ffn_up", "weight"): "up",
    ("ffn_down", "weight"): "down",
}
# What only some architectures have (llama.cpp loads them for these alone).
_QK_NORMS = {("attn_q_norm", "weight"): "q_norm", ("attn_k_norm", "weight"): "k_norm"}
_ROTATED = ("q", "k", "q_bias", "k_bias")


def _rope(reader: Any, arch: str, name: str) -> tuple[float, float]:
    """The rotary scale (1 / the linear factor) and attention factor llama.cpp applies;
    InexactError for a scaling it computes otherwise (YaRN, LongRoPE)."""
    kind = str(_field(reader, f"{arch}.rope.scaling.type", "linear"))
    factor = float(
        _field(
            reader, f"{arch}.rope.scaling.factor", _field(reader, f"{arch}.rope.scale_linear", 0.0)
        )
    )
    if kind not in ("none", "linear"):
        raise InexactError(
            f"{name} uses {kind} rope scaling, which the flat engine does not compute"
        )
    scale = 1.0 if kind == "none" or factor == 0.0 else 1.0 / factor
    return scale, float(_field(reader, f"{arch}.rope.scaling.attn_factor", 1.0))


def read_gguf(path: Path) -> tuple[LlamaShape, dict[str, Tensor]]:
    """The shape and the tensors of a llama, qwen2 or qwen3 GGUF file, named as shape.py names
    them: "embed", "norm", "out" (absent when tied), "rope_freqs" (where the file has one) and
    "<layer>.<q|k|v|o|gate|up|down|attn_norm|ffn_norm|q_bias|...|q_norm|k_norm>". Every tensor
    of the file is one of these: any other is an InexactError, never dropped."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # gguf raises ValueError, struct.error, ...: all "unreadable"
        raise ModelLoadError(f"could not read {path}: not a readable GGUF file ({exc})") from exc
    arch = str(_field(reader, "general.architecture"))
    if arch not in FAMILIES:
        raise InexactError(
            f"{path.name} is a {arch} model; the flat engine runs {', '.join(FAMILIES)} models"
        )
    heads = _uniform(reader, f"{arch}.attention.head_count")
    hidden = int(_field(reader, f"{arch}.embedding_length"))
    head_dim = int(_field(reader, f"{arch}.attention.key_length", hidden // heads))
    values = int(_field(reader, f"{arch}.attention.value_length", head_dim))
    rotated = int(_field(reader, f"{arch}.rope.dimension_count", head_dim))
    if values != head_dim or rotated != head_dim:
        raise InexactError(
            f"{path.name} has keys of {head_dim}, values of {values} and {rotated} rotated "
            "dimensions; the flat engine runs heads that are all three alike"
        )
    context = int(_field(reader, f"{arch}.context_length"))
    # A sliding window (Mistral) attends to the last W positions: within W, every position
    # attends to all before it, so the context stops there and every row is the file's model.
    window = int(_field(reader, f"{arch}.attention.sliding_window", 0))
    if 0 < window < context:
        context = window
    scale, attn = _rope(reader, arch, path.name)
    shape = LlamaShape(
        layers=_uniform(reader, f"{arch}.block_count"),
        hidden=hidden,
        ffn=_uniform(reader, f"{arch}.feed_forward_length"),
        heads=heads,
        kv_heads=_uniform(reader, f"{arch}.attention.head_count_kv", heads),
        head_dim=head_dim,
        vocab=0,
        context=context,
        eps=float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        rope_base=float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        arch=arch,
        rope_scale=scale,
        rope_attn=attn,
    )
    names = dict(_NAMES)
    if arch == "qwen3":
        names.update(_QK_NORMS)
    top = {"token_embd.weight": "embed", "output_norm.weight": "norm", "output.weight": "out"}
    if arch == "llama":
        top["rope_freqs.weight"] = "rope_freqs"
    out: dict[str, Tensor] = {}
    for t in reader.tensors:
        name = str(t.name)
        key = top.get(name)
        if key is None and name.startswith("blk."):
            layer, part, kind = [*name.split(".", 3), "", ""][1:4]
            known = names.get((part, kind))
            ours = known is not None and layer.isdigit() and int(layer) < shape.layers
            key = f"{layer}.{known}" if ours else None
        if key is None:
            raise InexactError(
                f"{path.name} has a tensor {name} that the flat engine does not compute"
            )
        w = decode(t)
        if FAMILIES[arch] and key.split(".")[-1] in _ROTATED:
            w = _unpermute(w, heads if ".q" in key else shape.kv_heads)
        out[key] = w
    embed = out.get("embed")
    if embed is None or "norm" not in out:
        raise ModelLoadError(f"{path.name} has no token embedding or output norm")
    if arch == "qwen3" and any(f"{i}.q_norm" not in out for i in range(shape.layers)):
        raise ModelLoadError(f"{path.name} is a qwen3 model without its q/k norms")
    shape.vocab = int(embed.q.shape[0] if isinstance(embed, Blocks4 | Blocks8) else embed.shape[0])
    return shape, out
