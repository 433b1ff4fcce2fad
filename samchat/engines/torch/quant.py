"""Weight-only int4 and int8 linears on torch's CPU kernels, and the quantization into them.

Both kernels take bfloat16 activations (the only ones they vectorize) and compute each output
row the same way whatever the number of rows, so a k-row verification equals k one-row steps
bit for bit on one instruction set. The int4 layout is packed for the CPU that runs it."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from samchat.engines.torch.gguf_weights import BLOCK, Blocks4, Blocks8, Tensor
from samchat.errors import ModelLoadError

FORMATS = ("int4", "int8")


def _float(w: Tensor) -> np.ndarray[Any, np.dtype[np.float32]]:
    return w if isinstance(w, np.ndarray) else w.dequantize()


def _bf16(a: torch.Tensor) -> torch.Tensor:
    return a.to(torch.bfloat16)


def to_blocks4(w: Tensor) -> Blocks4:
    """Group-32 4-bit weights: a GGUF 4-bit tensor as it is, anything else quantized (minimum
    and step of each group of 32, like Q4_1)."""
    if isinstance(w, Blocks4):
        return w
    f = torch.from_numpy(_float(w))
    rows, cols = f.shape
    if cols % BLOCK:
        raise ModelLoadError(f"a {rows}x{cols} weight does not split into groups of {BLOCK}")
    g = f.view(rows, cols // BLOCK, BLOCK)
    lo, hi = g.amin(-1), g.amax(-1)
    # The kernel reads scales and zeros in bfloat16: quantize against the rounded ones.
    scale = _bf16((hi - lo) / 15.0).float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    zero = _bf16(lo + 8.0 * scale).float()
    q = torch.round((g - zero[..., None]) / scale[..., None] + 8.0).clamp(0, 15)
    return Blocks4(
        q.to(torch.uint8).view(rows, cols).numpy(),
        scale.numpy().astype(np.float32),
        zero.numpy().astype(np.float32),
    )


def pack4(parts: list[Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The int4 kernel's packed weight and scales_and_zeros ([cols / 32, rows, 2] bfloat16)
    for the rows of `parts` stacked (a fused projection)."""
    blocks = [to_blocks4(p) for p in parts]
    q = torch.from_numpy(np.concatenate([b.q for b in blocks])).to(torch.int32)
    scale = torch.from_numpy(np.concatenate([b.scale for b in blocks]))
    zero = torch.from_numpy(np.concatenate([b.zero for b in blocks]))
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q.contiguous(), 1)
    sz = torch.stack([scale.t(), zero.t()], dim=-1).contiguous()
    return packed, _bf16(sz)


def pack8(parts: list[Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 weights and one bfloat16 scale per output row (symmetric, 127 steps each side)."""
    f = torch.from_numpy(np.concatenate([_float(p) for p in parts]))
    scale = _bf16(f.abs().amax(-1) / 127.0).float()
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(f / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q.contiguous(), _bf16(scale)


TILE = 16  # outputs per tile of the native forward's linears (native/tiles.h)


def tiles4(parts: list[Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The native forward's 4-bit tiles of the rows of `parts` stacked: the same 4-bit numbers
    as the GGUF, with float32 scales and offsets (value = q * scale + offset); the byte order
    is native/tiles.h's."""
    blocks = [to_blocks4(p) for p in parts]
    q = np.concatenate([b.q for b in blocks])
    scale = np.concatenate([b.scale for b in blocks]).astype(np.float32)
    offset = (np.concatenate([b.zero for b in blocks]) - 8.0 * scale).astype(np.float32)
    rows, cols = q.shape
    if rows % TILE:
        raise ModelLoadError(f"a {rows}x{cols} weight does not split into tiles of {TILE}")
    # (tile, lane, group, chunk, half, i) -> bytes (tile, group, chunk, lane, i): see tiles.h.
    g = q.reshape(rows // TILE, TILE, cols // BLOCK, 4, 2, 4)
    t = (g[:, :, :, :, 0, :] | (g[:, :, :, :, 1, :] << 4)).astype(np.uint8)
    t = t.transpose(0, 2, 3, 1, 4).reshape(rows // TILE, cols // 2 * TILE)
    return (
        torch.from_numpy(np.ascontiguousarray(t)),
        _tiled(scale, rows, cols),
        _tiled(offset, rows, cols),
    )


def tiles8(w: Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """8-bit tiles: Q8_0 blocks as they are, anything else quantized per group of 32."""
    if isinstance(w, Blocks8):
        q, d = w.q, w.d.astype(np.float32)
    else:
        f = _float(w)
        g = f.reshape(f.shape[0], -1, BLOCK)
        d = (np.abs(g).max(-1) / 127.0).astype(np.float32)
        d = np.where(d > 0, d, np.float32(1.0)).astype(np.float32)
        q = np.clip(np.round(g / d[..., None]), -127, 127).astype(np.int8).reshape(f.shape)
    rows, cols = q.shape
    if rows % TILE:
        raise ModelLoadError(f"a {rows}x{cols} weight does not split into tiles of {TILE}")
    t = q.reshape(rows // TILE, TILE, cols).transpose(0, 2, 1)
    return torch.from_numpy(np.ascontiguousarray(t)), _tiled(d, rows, cols)


def _tiled(v: np.ndarray[Any, Any], rows: int, cols: int) -> torch.Tensor:
    """Per-group values (rows, cols / 32) in tile order (rows / 16, cols / 32, 16)."""
    t = v.reshape(rows // TILE, TILE, cols // BLOCK).transpose(0, 2, 1)
    return torch.from_numpy(np.ascontiguousarray(t, dtype=np.float32))


def pack(fmt: str, parts: list[Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return pack4(parts) if fmt == "int4" else pack8(parts)


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
    """The token embedding's exact rows in float32: Q8_0 rows dequantized on lookup (a
    quarter of the memory of float32 rows), anything else kept as float32."""

    def __init__(self, q: torch.Tensor | None, d: torch.Tensor | None, f: torch.Tensor | None):
        self.q, self.d, self.f = q, d, f

    @classmethod
    def of(cls, w: Tensor) -> Embedding:
        if isinstance(w, Blocks8):
            return cls(torch.from_numpy(w.q), torch.from_numpy(w.d), None)
        return cls(None, None, torch.from_numpy(_float(w)))

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
        d = self.d.index_select(0, ids).repeat_interleave(BLOCK, dim=1)
        return q * d
