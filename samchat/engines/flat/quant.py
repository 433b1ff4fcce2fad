"""The flat engine's weights: tiles that hold a GGUF tensor's own numbers for the native
forward (native/tiles.h), torch's weight-only int4/int8 kernels for the Python forward, and the
quantization into them where it is asked for.

Torch's kernels take bfloat16 activations (the only ones they vectorize) and compute each
output row the same way whatever the number of rows, so a k-row verification equals k one-row
steps bit for bit on one instruction set; their scales are bfloat16, so they hold the file's
numbers only approximately. The int4 layout is packed for the CPU that runs it."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from samchat.engines.flat.gguf_weights import (
    BLOCK,
    GROUP8,
    SUPER,
    Blocks4,
    Blocks8,
    Factors,
    Floats,
    Tensor,
    dequantized,
    kind_of,
)
from samchat.errors import ModelLoadError

FORMATS = ("int4", "int8")
TILE = 16  # outputs per tile of the native forward's linears (native/tiles.h)
# The parts of a tiled linear, each named "<linear>.<part>": its weights (4-bit, 8-bit or
# float) and its scales and offsets. A step reads every byte of them.
TILE_PARTS = ("t4", "t8", "tf", "ts", "tz")
# How the native forward holds a linear (forward.cpp's Kind): 4-bit, 8-bit or float tiles; the
# K kinds round inputs to 8 bits per 256 instead of 32, as llama.cpp does for the K-quants.
TILES4, TILES8, TILESF, TILES4K, TILES8K = 2, 3, 4, 5, 6
# How a tile kind holds its group scales and offsets (tiles.h's Held scales), in the fewest
# bytes that keep each value exact, since a one-token step's time is the reading of them:
# float32 per group (S32), float16 (S16) where each value is one, or a K-quant's own float per
# 256 inputs times a signed byte per group (SK); offsets likewise, or none (Z0), or -8 times
# the scale (ZM8: Q4_0's). A kind's number carries them: base | scales << 3 | offsets << 5.
S32, S16, SK = 0, 1, 2
Z0, Z32, Z16, ZK, ZM8 = 0, 1, 2, 3, 4
# The pairs the kernels are compiled for (tiles.h's linear), by the types that give them; any
# other is held as float32.
HELD4 = {(S32, Z32), (S16, ZM8), (S16, Z16), (SK, ZK)}  # Q4_0, Q4_1, Q4_K
HELD8 = {(S32, Z0), (S32, Z32), (S16, Z0), (SK, Z0), (SK, ZK)}  # Q8_0, Q3_K, Q2_K
# 5- and 6-bit types in their own bits (tiles.h's tilep): extra bits above a nibble and the
# bias that makes their values unsigned, by type; the modes each is compiled for.
PLANES = {"Q5_0": (1, 16), "Q5_1": (1, 0), "Q5_K": (1, 0), "Q6_K": (2, 32)}
HELD_PLANES = {1: {(S16, Z0), (S16, Z16), (SK, ZK)}, 2: {(SK, Z0)}}


def is_tile_part(name: str) -> bool:
    """Whether the kept file's tensor `name` is a part of a tiled linear (TILE_PARTS)."""
    return name.rsplit(".", 1)[-1] in TILE_PARTS


def base_kind(kind: int) -> int:
    """A linear's kind without its scales' and offsets' modes (TILES4 .. TILES8K)."""
    return kind & 7


K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")


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


def _tiled(v: npt.NDArray[np.generic], rows: int) -> torch.Tensor:
    """Per-group values (rows, groups) in tile order (rows / 16, groups, 16)."""
    t = v.reshape(rows // TILE, TILE, -1).transpose(0, 2, 1)
    return torch.from_numpy(np.ascontiguousarray(t))


def _factored(d: npt.NDArray[np.float32], ints: npt.NDArray[np.int8], rows: int) -> torch.Tensor:
    """SK bytes: for each tile and block of 256 inputs, its 16 outputs' float32 d, then each
    group's 16 signed bytes (rows / 16, blocks, 64 + 16 * groups per block)."""
    blocks = d.shape[1]
    dt = d.reshape(rows // TILE, TILE, blocks).transpose(0, 2, 1)
    it = ints.reshape(rows // TILE, TILE, blocks, -1).transpose(0, 2, 3, 1)
    both = np.concatenate(
        [
            np.ascontiguousarray(dt, dtype=np.float32).view(np.uint8),
            np.ascontiguousarray(it).view(np.uint8).reshape(rows // TILE, blocks, -1),
        ],
        axis=-1,
    )
    return torch.from_numpy(np.ascontiguousarray(both).reshape(rows // TILE, -1))


def _exact16(v: npt.NDArray[np.float32]) -> bool:
    with np.errstate(over="ignore"):
        return bool(np.array_equal(v.astype(np.float16).astype(np.float32), v))


def _held(
    scale: npt.NDArray[np.float32],
    offset: npt.NDArray[np.float32],
    factors: list[Factors | None],
    rows: int,
    four: bool,
    allowed: set[tuple[int, int]] | None = None,
) -> tuple[int, int, dict[str, torch.Tensor]]:
    """The scales' and offsets' modes and tensors ("ts", "tz"): the narrowest exact form."""
    group = BLOCK if four else GROUP8
    whole = (scale.shape[1] * group) % SUPER == 0
    fs = [f for f in factors if f is not None] if whole else []
    both = len(fs) == len(factors)
    d = np.concatenate([f.d for f in fs]) if both else None
    out: dict[str, torch.Tensor] = {}
    per = SUPER // group

    def rebuilt(dv: npt.NDArray[np.float32], iv: npt.NDArray[np.int8]) -> npt.NDArray[np.float32]:
        r: npt.NDArray[np.float32] = np.repeat(dv, per, axis=1) * iv.astype(np.float32)
        return r

    sc = np.concatenate([f.sc for f in fs]) if d is not None else None
    if d is not None and sc is not None and np.array_equal(rebuilt(d, sc), scale):
        smode, out["ts"] = SK, _factored(d, sc, rows)
    elif _exact16(scale):
        smode, out["ts"] = S16, _tiled(scale.astype(np.float16), rows)
    else:
        smode, out["ts"] = S32, _tiled(scale, rows)
    mins = [f for f in fs if f.dmin is not None and f.mn is not None] if both else []
    if not np.any(offset):
        zmode = Z0
    elif four and np.array_equal(offset, np.float32(-8.0) * scale):
        zmode = ZM8
    elif len(mins) == len(factors) and np.array_equal(
        rebuilt(
            dm := np.concatenate([f.dmin for f in mins if f.dmin is not None]),
            mn := np.concatenate([f.mn for f in mins if f.mn is not None]),
        ),
        offset,
    ):
        zmode, out["tz"] = ZK, _factored(dm, mn, rows)
    elif _exact16(offset):
        zmode, out["tz"] = Z16, _tiled(offset.astype(np.float16), rows)
    else:
        zmode, out["tz"] = Z32, _tiled(offset, rows)
    if (smode, zmode) not in (allowed or (HELD4 if four else HELD8)):
        out = {"ts": _tiled(scale, rows)}
        if np.any(offset) or four:
            out["tz"] = _tiled(offset, rows)
        return S32, Z32 if "tz" in out else Z0, out
    return smode, zmode, out


def tiles4(blocks: list[Blocks4]) -> tuple[int, dict[str, torch.Tensor]]:
    """4-bit tiles of the rows of `blocks` stacked: the same 4-bit numbers, their scales and
    offsets held exactly (value = q * scale + offset); the byte order is native/tiles.h's.
    Returns the scales' and offsets' modes (scales | offsets << 2) and the tensors."""
    q = np.concatenate([b.q for b in blocks])
    rows, cols = q.shape
    _check(rows, cols)
    # (tile, lane, group, chunk, half, i) -> bytes (tile, group, chunk, lane, i): see tiles.h.
    g = q.reshape(rows // TILE, TILE, cols // BLOCK, 4, 2, 4)
    t = (g[:, :, :, :, 0, :] | (g[:, :, :, :, 1, :] << 4)).astype(np.uint8)
    t = t.transpose(0, 2, 3, 1, 4).reshape(rows // TILE, cols // 2 * TILE)
    smode, zmode, held = _held(
        np.concatenate([b.scale for b in blocks]),
        np.concatenate([b.offset for b in blocks]),
        [b.factors for b in blocks],
        rows,
        four=True,
    )
    return smode | zmode << 2, {"t4": torch.from_numpy(np.ascontiguousarray(t)), **held}


def tiles8(blocks: list[Blocks8]) -> tuple[int, dict[str, torch.Tensor]]:
    """8-bit tiles: bytes q + 128 in tiles.h's order, scales and offsets per 16 held exactly
    (no offsets where they are all zero); modes as tiles4's."""
    q = np.concatenate([b.q for b in blocks])
    rows, cols = q.shape
    _check(rows, cols)
    u = (q.view(np.uint8) ^ np.uint8(0x80)).reshape(rows // TILE, TILE, cols // 4, 4)
    t = u.transpose(0, 2, 1, 3).reshape(rows // TILE, cols * TILE)
    smode, zmode, held = _held(
        np.concatenate([b.scale for b in blocks]),
        np.concatenate([b.offset for b in blocks]),
        [b.factors for b in blocks],
        rows,
        four=False,
    )
    return smode | zmode << 2, {"t8": torch.from_numpy(np.ascontiguousarray(t)), **held}


def planes(blocks: list[Blocks8]) -> tuple[int, dict[str, torch.Tensor]] | None:
    """5- or 6-bit tiles (tiles.h's tilep) where every part is one type of PLANES whose values
    fit, else None: the modes (scales | offsets << 2 | extra bits << 5 | bias / 16 << 7)."""
    layouts = {PLANES.get(b.kind) for b in blocks}
    if len(layouts) != 1 or None in layouts:
        return None
    extra, bias = next(iter(layouts))  # type: ignore[misc]
    q = np.concatenate([b.q for b in blocks]).astype(np.int16) + bias
    rows, cols = q.shape
    _check(rows, cols)
    if q.min() < 0 or q.max() >= 1 << (4 + extra):
        return None
    u = q.astype(np.uint8).reshape(rows // TILE, TILE, cols // BLOCK, 4, 2, 4)
    nib = (u[:, :, :, :, 0, :] & 15) | ((u[:, :, :, :, 1, :] & 15) << 4)
    nib = nib.transpose(0, 2, 3, 1, 4).reshape(rows // TILE, cols // BLOCK, 256)
    high = (u >> 4).reshape(rows // TILE, TILE, cols // BLOCK, 8, 4)  # by 2c + h
    ext = np.zeros((rows // TILE, TILE, cols // BLOCK, extra, 4), dtype=np.uint8)
    for p in range(8):
        ext[:, :, :, extra * p // 8, :] |= high[:, :, :, p, :] << np.uint8(extra * p % 8)
    ext = ext.transpose(0, 2, 3, 1, 4).reshape(rows // TILE, cols // BLOCK, 64 * extra)
    t = np.concatenate([nib, ext], axis=-1).reshape(rows // TILE, -1)
    smode, zmode, held = _held(
        np.concatenate([b.scale for b in blocks]),
        np.concatenate([b.offset for b in blocks]),
        [b.factors for b in blocks],
        rows,
        four=False,
        allowed=HELD_PLANES[extra],
    )
    if (smode, zmode) not in HELD_PLANES[extra]:
        return None
    modes = smode | zmode << 2 | extra << 5 | bias // 16 << 7
    return modes, {"t8": torch.from_numpy(np.ascontiguousarray(t)), **held}


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
    # A fused linear of K-quants and other types (not seen in llama.cpp's files) rounds
    # inputs per 32, the finer of the two.
    k256 = not requantize and all(kind_of(p) in K_QUANTS for p in parts)
    if requantize or all(isinstance(p, Blocks4) for p in parts):
        modes, t = tiles4([to_blocks4(p) for p in parts])
        return (TILES4K if k256 else TILES4) | modes << 3, t
    if all(isinstance(p, Blocks4 | Blocks8) for p in parts):
        blocks = [to_blocks8(p) for p in parts]
        modes, t = planes(blocks) or tiles8(blocks)
        return (TILES8K if k256 else TILES8) | modes << 3, t
    return TILESF, tilesf(parts)


def output_tiles(w: Tensor, requantize: bool = False) -> tuple[int, dict[str, torch.Tensor]]:
    """The output projection's tiles: its own numbers; with `requantize`, 8 bits per group of
    32 (4 bits would cost the bundled model 5% of perplexity)."""
    if requantize:
        modes, t = tiles8([to_blocks8(w)])
        return TILES8 | modes << 3, t
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
