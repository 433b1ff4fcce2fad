"""A LLaMA-family GGUF file's tensors as the lean int4/int8 forward takes them: 4-bit blocks
(Q4_0, Q4_1) keep their own quantized numbers, Q8_0 keeps its bytes (the embedding reads its
exact rows), anything else is dequantized to float32 (and quantized again by quant.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from samchat.engines.torch.shape import LlamaShape
from samchat.errors import ModelLoadError

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


_NAMES = {
    "attn_norm": "attn_norm",
    "ffn_norm": "ffn_norm",
    "attn_q": "q",
    "attn_k": "k",
    "attn_v": "v",
    "attn_output": "o",
    "ffn_gate": "gate",
    "ffn_up": "up",
    "ffn_down": "down",
}


def read_gguf(path: Path) -> tuple[LlamaShape, dict[str, Tensor]]:
    """The shape and the tensors of a LLaMA GGUF file, named as shape.py names them:
    "embed", "norm", "out" (absent when tied) and "<layer>.<q|k|v|o|gate|up|down|...>"."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)
    except Exception as exc:  # gguf raises ValueError, struct.error, ...: all "unreadable"
        raise ModelLoadError(f"could not read {path}: not a readable GGUF file ({exc})") from exc
    arch = str(_field(reader, "general.architecture"))
    if arch != "llama":
        raise ModelLoadError(
            f"{path.name} is a {arch} model; --dtype int4/int8 runs LLaMA-family models "
            "(use --dtype float32, or --engine llamacpp)"
        )
    heads = int(_field(reader, "llama.attention.head_count"))
    hidden = int(_field(reader, "llama.embedding_length"))
    shape = LlamaShape(
        layers=int(_field(reader, "llama.block_count")),
        hidden=hidden,
        ffn=int(_field(reader, "llama.feed_forward_length")),
        heads=heads,
        kv_heads=int(_field(reader, "llama.attention.head_count_kv", heads)),
        head_dim=int(_field(reader, "llama.rope.dimension_count", hidden // heads)),
        vocab=0,
        context=int(_field(reader, "llama.context_length")),
        eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon")),
        rope_base=float(_field(reader, "llama.rope.freq_base", 10000.0)),
    )
    out: dict[str, Tensor] = {}
    for t in reader.tensors:
        name = str(t.name)
        if name == "token_embd.weight":
            out["embed"] = decode(t)
        elif name == "output_norm.weight":
            out["norm"] = decode(t)
        elif name == "output.weight":
            out["out"] = decode(t)
        elif name.startswith("blk."):
            _, layer, part, _ = name.split(".", 3)
            if part not in _NAMES:
                raise ModelLoadError(f"{path.name}: tensor {name} is not of a LLaMA model")
            w = decode(t)
            if part in ("attn_q", "attn_k"):
                w = _unpermute(w, heads if part == "attn_q" else shape.kv_heads)
            out[f"{layer}.{_NAMES[part]}"] = w
    embed = out.get("embed")
    if embed is None or "norm" not in out:
        raise ModelLoadError(f"{path.name} has no token embedding or output norm")
    shape.vocab = int(embed.q.shape[0] if isinstance(embed, Blocks4 | Blocks8) else embed.shape[0])
    return shape, out
