"""The flat engine's weights: tiles that hold a GGUF tensor's own numbers for the native
forward (native/tiles.h), torch's weight-only int4/int8 kernels for the Python forward, and the
quantization into them where it is asked for.

Torch's kernels take bfloat16 activations (the only ones they vectorize) and compute each
output row the same way whatever the number of rows, so a k-row verification equals k one-row
steps bit for bit on one instruction set; their scales are bfloat16, so they hold the file's
numbers only approximately. The int4 layout is packed for the CPU that runs it."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from samchat.engines.flat.gguf_weights import (
    BLOCK,
    GROUP8,
    Blocks4,
    Blocks8,
    Floats,
    Tensor,
    dequantized,
)
from samchat.errors import ModelLoadError

FORMATS = ("int4", "int8")
TILE = 16  # outputs per tile of the native forward's linears (native/tiles.h)
# How the native forward holds a linear (forward.cpp's Kind): 4-bit, 8-bit or float tiles.
TILES4, TILES8, TILESF = 2, 3, 4


def _bf16(a: torch.Tensor) -> torch.Tensor:
    return a.to(torch.bfloat16)


def to_blocks4(w: Tensor) -> Blocks4:
    """Group-32 4-bit weights: a 4-bit GGUF tensor as it is, anything else quantized (minimum
    and step of each group of 32, like Q4_1)."""
    if isinstance(w, Blocks4):
        return w
    f = torch.from_numpy(np.array(dequantized(w), dtype=np.float32))  # writable
    rows, cols = f.shape
    if cols % BLOCK:
        raise ModelLoadError(f"a {rows}x{cols} weight does not split into groups of {BLOCK}")
    g = f.view(rows, cols // BLOCK, BLOCK)
    lo, hi = g.amin(-1), g.amax(-1)
    # torch's kernel reads scales and zeros in bfloat16: quantize against the rounded ones.
    scale = _bf16((hi - lo) / 15.0).float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = _bf16(lo + 8.0 * scale).float()
    q = torch.round((g - zero[..., None]) / scale[..., None] + 8.0).clamp(0, 15)
    return Blocks4(
        q.to(torch.uint8).view(rows, cols).numpy(),
        scale.numpy().astype(np.float32),
        (zero - 8.0 * scale).numpy().astype(np.float32),
        "int4",
    )


def to_blocks8(w: Tensor) -> Blocks8:
    """Signed 8-bit weights with one step per 32 (as Q8_0): an 8-bit GGUF tensor as it is,
    a 4-bit one widened exactly, anything else quantized."""
    if isinstance(w, Blocks8):
        return w
    if isinstance(w, Blocks4):
        return w.as8()
    f = dequantized(w)
    rows, cols = f.shape
    g = f.reshape(rows, cols // BLOCK, BLOCK)
    d = (np.abs(g).max(-1) / 127.0).astype(np.float32)
    d = np.where(d > 0, d, np.float32(1.0)).astype(np.float32)
    q = np.clip(np.round(g / d[..., None]), -127, 127).astype(np.int8).reshape(rows, cols)
    scale = np.repeat(d, BLOCK // GROUP8, axis=1)
    return Blocks8(q, scale, np.zeros_like(scale), "int8")


def pack4(parts: list[Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's int4 kernel's packed weight and scales_and_zeros ([cols / 32, rows, 2]
    bfloat16) for the rows of `parts` stacked (a fused projection)."""
    blocks = [to_blocks4(p) for p in parts]
    q = torch.from_numpy(np.concatenate([b.q for b in blocks])).to(torch.int32)
    scale = torch.from_numpy(np.concatenate([b.scale for b in blocks]))
    zero = torch.from_numpy(np.concatenate([b.offset for b in blocks])) + 8.0 * scale
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
    sz = torch.stack([scale.t(), zero.t()], dim=-1).contiguous()
    return packed, _bf16(sz)


def pack8(parts: list[Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 weights and one bfloat16 scale per output row (symmetric, 127 steps each side)."""
    f = torch.from_numpy(np.concatenate([dequantized(p) for p in parts]))
    scale = _bf16(f.abs().amax(-1) / 127.0).float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(f / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.contiguous(), _bf16(scale)


def pack(fmt: str, parts: list[Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return pack4(parts) if fmt == "int4" else pack8(parts)


def _check(rows: int, cols: int) -> None:
    if rows % TILE or cols % BLOCK:
        raise ModelLoadError(
            f"a {rows}x{cols} weight does not split into tiles of {TILE} outputs and groups "
            f"of {BLOCK} inputs"
        )


def _tiled(v: np.ndarray[Any, Any], rows: int) -> torch.Tensor:
    """Per-group values (rows, groups) in tile order (rows / 16, groups, 16)."""
    t = v.reshape(rows // TILE, TILE, -1).transpose(0, 2, 1)
    return torch.from_numpy(np.ascontiguousarray(t, dtype=np.float32))


def tiles4(blocks: list[Blocks4]) -> dict[str, torch.Tensor]:
    """4-bit tiles of the rows of `blocks` stacked: the same 4-bit numbers, with float32
    scales and offsets (value = q * scale + offset); the byte order is native/tiles.h's."""
    q = np.concatenate([b.q for b in blocks])
    rows, cols = q.shape
    _check(rows, cols)
    # (tile, lane, group, chunk, half, i) -> bytes (tile, group, chunk, lane, i): see tiles.h.
    g = q.reshape(rows // TILE, TILE, cols // BLOCK, 4, 2, 4)
    t = (g[:, :, :, :, 0, :] | (g[:, :, :, :, 1, :] << 4)).astype(np.uint8)
    t = t.transpose(0, 2, 3, 1, 4).reshape(rows // TILE, cols // 2 * TILE)
    return {
        "t4": torch.from_numpy(np.ascontiguousarray(t)),
        "ts": _tiled(np.concatenate([b.scale for b in blocks]), rows),
        "tz": _tiled(np.concatenate([b.offset for b in blocks]), rows),
    }


def tiles8(blocks: list[Blocks8]) -> dict[str, torch.Tensor]:
    """8-bit tiles: bytes q + 128 in tiles.h's order, float32 scales and offsets per 16 (no
    offsets where they are all zero)."""
    q = np.concatenate([b.q for b in blocks])
    rows, cols = q.shape
    _check(rows, cols)
    u = (q.view(np.uint8) ^ np.uint8(0x80)).reshape(rows // TILE, TILE, cols // 4, 4)
    t = u.transpose(0, 2, 1, 3).reshape(rows // TILE, cols * TILE)
    offset = np.concatenate([b.offset for b in blocks])
    out = {
        "t8": torch.from_numpy(np.ascontiguousarray(t)),
        "ts": _tiled(np.concatenate([b.scale for b in blocks]), rows),
    }
    if np.any(offset != 0):
        out["tz"] = _tiled(offset, rows)
    return out


def tilesf(parts: list[Tensor]) -> dict[str, torch.Tensor]:
    """Float tiles (rows / 16, cols, 16): in the parts' own type where they share one (F16,
    BF16, F32), else float32 (each part's values as llama.cpp dequantizes them)."""
    kinds = {p.kind if isinstance(p, Floats) else "" for p in parts}
    if kinds == {"F16"}:
        v = torch.from_numpy(np.concatenate([p.values for p in parts if isinstance(p, Floats)]))
    elif kinds == {"BF16"}:
        raw = np.concatenate([p.values for p in parts if isinstance(p, Floats)])
        v = torch.from_numpy(raw.view(np.int16)).view(torch.bfloat16)
    else:
        v = torch.from_numpy(np.concatenate([dequantized(p) for p in parts]))
    rows, cols = v.shape
    _check(rows, cols)
    t = v.reshape(rows // TILE, TILE, cols).transpose(1, 2).contiguous()
    return {"tf": t}


def tiles(parts: list[Tensor], requantize: bool = False) -> tuple[int, dict[str, torch.Tensor]]:
    """The native forward's tiles of a linear (the rows of `parts` stacked, a fused
    projection) and their kind: the parts' own numbers, in the narrowest tiles that hold them
    all; with `requantize`, 4-bit tiles of every part (float and other types quantized)."""
    if requantize or all(isinstance(p, Blocks4) for p in parts):
        return TILES4, tiles4([to_blocks4(p) for p in parts])
    if all(isinstance(p, Blocks4 | Blocks8) for p in parts):
        return TILES8, tiles8([to_blocks8(p) for p in parts])
    return TILESF, tilesf(parts)


def output_tiles(w: Tensor, requantize: bool = False) -> tuple[int, dict[str, torch.Tensor]]:
    """The output projection's tiles: its own numbers; with `requantize`, 8 bits per group of
    32 (4 bits would cost the bundled model 5% of perplexity)."""
    if requantize:
        return TILES8, tiles8([to_blocks8(w)])
    return tiles([w])


class Linear:
    """y = x @ W.T for bfloat16 rows x, on a packed weight (int4 or int8)."""

    def __init__(self, fmt: str, weight: torch.Tensor, scales: torch.Tensor) -> None:
        self.fmt = fmt
        self.weight = weight
        self.scales = scales

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.fmt == "int4":
            out: torch.Tensor = torch.ops.aten._weight_int4pack_mm_for_cpu(
                x, self.weight, BLOCK, self.scales
            )
            return out
        out8: torch.Tensor = torch.ops.aten._weight_int8pack_mm(x, self.weight, self.scales)
        return out8


class Embedding:
    """The token embedding's rows in float32, each value as llama.cpp dequantizes it:
    quantized rows held as 8-bit values with a scale and offset per 16 and dequantized on
    lookup (a quarter of the memory of float32 rows), float rows as float32."""

    def __init__(self, q: torch.Tensor | None, d: torch.Tensor | None, f: torch.Tensor | None):
        self.q, self.d, self.f = q, d, f  # d: (vocab, hidden / 16, 2), scale and offset

    @classmethod
    def of(cls, w: Tensor) -> Embedding:
        if isinstance(w, Blocks4 | Blocks8):
            b = to_blocks8(w)
            d = np.stack([b.scale, b.offset], axis=-1).astype(np.float32)
            return cls(torch.from_numpy(b.q), torch.from_numpy(np.ascontiguousarray(d)), None)
        return cls(None, None, torch.from_numpy(np.array(dequantized(w), dtype=np.float32)))

    def tensors(self) -> dict[str, torch.Tensor]:
        if self.f is not None:
            return {"embed.f": self.f}
        assert self.q is not None and self.d is not None
        return {"embed.q": self.q, "embed.d": self.d}

    @classmethod
    def from_tensors(cls, t: dict[str, torch.Tensor]) -> Embedding:
        return cls(t.get("embed.q"), t.get("embed.d"), t.get("embed.f"))

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        if self.f is not None:
            return self.f.index_select(0, ids)
        assert self.q is not None and self.d is not None
        q = self.q.index_select(0, ids).float()
        d = self.d.index_select(0, ids).repeat_interleave(GROUP8, dim=1)
        return q * d[..., 0] + d[..., 1]
