"""A llama, qwen2 or qwen3 GGUF file's tensors as the flat engine holds them, each with the
numbers llama.cpp dequantizes: 4-bit types (Q4_0, Q4_1, Q4_K) as 4-bit values with a float32
scale and offset per 32, the 2- to 8-bit types (Q2_K, Q3_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0) as
signed 8-bit values with a float32 scale and offset per 16, and float types (F32, F16, BF16) as
their own rows. Each scale and offset is a product of the file's numbers that float32 holds
exactly, so q * scale + offset rounds as llama.cpp's dequantization does. Any other type is
refused (exactness.NotExactError) unless requantizing was asked for. The K-quants also keep
their scales' own factors (Factors), so that tiles can hold a byte per group instead of a float."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from samchat.engines.flat.exactness import NotExactError
from samchat.engines.flat.shape import LlamaShape
from samchat.errors import InexactError, ModelLoadError

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType, ReaderTensor

    from samchat.models.gguf_header import Value

    Meta = dict[str, Value]

BLOCK = 32  # values per 4-bit group, and per group of activations rounded to 8 bits
GROUP8 = 16  # values per group of 8-bit weights (the K-quants' smallest sub-block)
F32 = np.float32
Bytes = npt.NDArray[np.uint8]  # a tensor's blocks, one row of bytes each
Floats32 = npt.NDArray[np.float32]
Rows = npt.NDArray[np.intp]  # an order of rows
# A block type's numbers: 4-bit (0..15) or signed 8-bit values, and their scale and offset.
Codes = npt.NDArray[np.uint8] | npt.NDArray[np.int8]
Int8s = npt.NDArray[np.int8]
# A K-quant block's factors (per block of 256: d, the per-group integers, dmin and the mins).
KParts = tuple[Floats32, Int8s, Floats32 | None, Int8s | None]
Parts = tuple[Codes, Floats32, Floats32, KParts | None]
SUPER = 256  # inputs per K-quant block, whose d and dmin the group scales share
# Float weights as the file holds them (bfloat16 as its uint16 bits).
FileFloats = npt.NDArray[np.float32 | np.float16 | np.uint16]


@dataclass(frozen=True)
class Factors:
    """A K-quant's group scales and offsets as the file holds them: a float per 256 inputs
    times a small integer per group, scale = d * sc and offset = dmin * mn, each product exact
    in float32 (an 11-bit float16 times a 7-bit integer)."""

    d: Floats32  # (rows, cols / 256)
    sc: Int8s  # (rows, groups)
    dmin: Floats32 | None = None  # None: no offsets
    mn: Int8s | None = None

    def take_rows(self, order: Rows) -> Factors:
        if self.dmin is None or self.mn is None:
            return Factors(self.d[order], self.sc[order])
        return Factors(self.d[order], self.sc[order], self.dmin[order], self.mn[order])

    def split(self, reps: int) -> Factors:
        """The same factors for groups `reps` times smaller."""
        mn = None if self.mn is None else np.repeat(self.mn, reps, axis=1)
        return Factors(self.d, np.repeat(self.sc, reps, axis=1), self.dmin, mn)


@dataclass
class Blocks4:
    """4-bit weights (rows, cols): value = q * scale + offset, q in 0..15, per group of 32."""

    q: npt.NDArray[np.uint8]
    scale: Floats32  # (rows, cols / 32)
    offset: Floats32
    kind: str = "Q4_1"
    factors: Factors | None = None

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.q.shape
        return rows, cols

    def dequantize(self) -> Floats32:
        return _values(self.q, self.scale, self.offset, BLOCK)

    def take_rows(self, order: Rows) -> Blocks4:
        f = None if self.factors is None else self.factors.take_rows(order)
        return Blocks4(self.q[order], self.scale[order], self.offset[order], self.kind, f)

    def as8(self) -> Blocks8:
        """The same values as 8-bit weights (to share a fused linear with 8-bit parts)."""
        scale = np.repeat(self.scale, BLOCK // GROUP8, axis=1)
        offset = np.repeat(self.offset, BLOCK // GROUP8, axis=1)
        f = None if self.factors is None else self.factors.split(BLOCK // GROUP8)
        return Blocks8(self.q.astype(np.int8), scale, offset, self.kind, f)


@dataclass
class Blocks8:
    """Signed 8-bit weights (rows, cols): value = q * scale + offset, per group of 16."""

    q: npt.NDArray[np.int8]
    scale: Floats32  # (rows, cols / 16)
    offset: Floats32
    kind: str = "Q8_0"
    factors: Factors | None = None

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.q.shape
        return rows, cols

    def dequantize(self) -> Floats32:
        return _values(self.q, self.scale, self.offset, GROUP8)

    def take_rows(self, order: Rows) -> Blocks8:
        f = None if self.factors is None else self.factors.take_rows(order)
        return Blocks8(self.q[order], self.scale[order], self.offset[order], self.kind, f)


@dataclass
class Floats:
    """Float weights (rows, cols) as the file stores them: float32, float16, or bfloat16
    (uint16 bits, numpy having no bfloat16)."""

    values: FileFloats
    kind: str = "F32"

    @property
    def shape(self) -> tuple[int, int]:
        rows, cols = self.values.shape
        return rows, cols

    def dequantize(self) -> Floats32:
        if self.kind == "BF16":
            bits = self.values.astype(np.uint32) << np.uint32(16)
            out: Floats32 = bits.view(F32)
            return out
        return np.asarray(self.values, dtype=F32)

    def take_rows(self, order: Rows) -> Floats:
        return Floats(np.ascontiguousarray(self.values[order]), self.kind)


# A tensor as read: a quantized or float matrix, or a float32 vector (a norm's weights).
Tensor = Blocks4 | Blocks8 | Floats | Floats32


def kind_of(w: Tensor) -> str:
    return "F32" if isinstance(w, np.ndarray) else w.kind


def dequantized(w: Tensor) -> Floats32:
    return w if isinstance(w, np.ndarray) else w.dequantize()


def _values(q: Codes, scale: Floats32, offset: Floats32, group: int) -> Floats32:
    """q * scale + offset in float32, two roundings (the product is exact): as llama.cpp."""
    rows, cols = q.shape
    g = q.reshape(rows, cols // group, group).astype(F32)
    w = g * scale[..., None] + offset[..., None]
    out: Floats32 = w.reshape(rows, cols).astype(F32)
    return out


def _f16(b: Bytes, at: int) -> Floats32:
    """The float16 at byte `at` of each block, as float32 (exact)."""
    out: Floats32 = np.ascontiguousarray(b[..., at : at + 2]).view(np.float16)[..., 0].astype(F32)
    return out


def _bits(b: Bytes, shifts: list[int], mask: int) -> Bytes:
    """(n, m) bytes -> (n, len(shifts), m): each byte shifted by each shift, masked."""
    s = np.array(shifts, dtype=np.uint8).reshape(1, -1, 1)
    out: Bytes = (b[:, None, :] >> s) & np.uint8(mask)
    return out


def _q4_0(b: Bytes) -> Parts:
    d = _f16(b, 0)
    q = _bits(b[:, 2:18], [0, 4], 0x0F).reshape(-1, 32)
    return q, d[:, None], (-8.0 * d)[:, None], None


def _q4_1(b: Bytes) -> Parts:
    q = _bits(b[:, 4:20], [0, 4], 0x0F).reshape(-1, 32)
    return q, _f16(b, 0)[:, None], _f16(b, 2)[:, None], None


def _q5(b: Bytes, with_min: bool) -> Parts:
    at = 4 if with_min else 2
    qh = np.ascontiguousarray(b[:, at : at + 4]).view(np.uint32)  # (n, 1)
    high = ((qh >> np.arange(32, dtype=np.uint32)[None, :]) & np.uint32(1)).astype(np.uint8)
    low = _bits(b[:, at + 4 : at + 20], [0, 4], 0x0F).reshape(-1, 32)
    q = (low | (high << np.uint8(4))).astype(np.int8)
    d = _f16(b, 0)
    if with_min:
        return q, d[:, None], _f16(b, 2)[:, None], None
    return q - np.int8(16), d[:, None], np.zeros_like(d)[:, None], None


def _q8_0(b: Bytes) -> Parts:
    d = _f16(b, 0)
    q = np.ascontiguousarray(b[:, 2:34]).view(np.int8)
    return q, d[:, None], np.zeros_like(d)[:, None], None


def _ints(v: Floats32) -> Int8s:
    out: Int8s = v.astype(np.int8)
    return out


def _scale_min_k4(s: Bytes) -> tuple[Floats32, Floats32]:
    """Q4_K/Q5_K's twelve bytes of 6-bit scales and mins (ggml's get_scale_min_k4)."""
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([d & 0x3F, (md & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (md >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(F32), mn.astype(F32)


def _q4_k(b: Bytes) -> Parts:
    d, dmin = _f16(b, 0)[:, None], _f16(b, 2)[:, None]
    sc, mn = _scale_min_k4(b[:, 4:16])
    q = b[:, 16:144].reshape(-1, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    k = (d, _ints(sc), dmin, _ints(-mn))
    return (q & np.uint8(0x0F)).reshape(-1, 256), d * sc, -(dmin * mn), k


def _q5_k(b: Bytes) -> Parts:
    d, dmin = _f16(b, 0)[:, None], _f16(b, 2)[:, None]
    sc, mn = _scale_min_k4(b[:, 4:16])
    qh = b[:, 16:48]
    low = b[:, 48:176].reshape(-1, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    low = (low & np.uint8(0x0F)).reshape(-1, 8, 32)
    high = _bits(qh, list(range(8)), 1)  # (n, 8, 32): sub-block j's fifth bit
    q = (low | (high << np.uint8(4))).reshape(-1, 256).astype(np.int8)
    k = (d, _ints(sc), dmin, _ints(-mn))
    return q, np.repeat(d * sc, 2, axis=1), np.repeat(-(dmin * mn), 2, axis=1), k


def _q6_k(b: Bytes) -> Parts:
    ql = b[:, 0:128].reshape(-1, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    ql = (ql & np.uint8(0x0F)).reshape(-1, 8, 32)
    qh = b[:, 128:192].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    qh = (qh & np.uint8(0x03)).reshape(-1, 8, 32)
    q = (ql | (qh << np.uint8(4))).astype(np.int8).reshape(-1, 256) - np.int8(32)
    sc8 = np.ascontiguousarray(b[:, 192:208]).view(np.int8)
    sc = sc8.astype(F32)
    d = _f16(b, 208)[:, None]
    return q, d * sc, np.zeros_like(sc), (d, sc8, None, None)


def _q2_k(b: Bytes) -> Parts:
    sc = b[:, 0:16]
    q = b[:, 16:80].reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    q = (q & np.uint8(3)).reshape(-1, 256).astype(np.int8)
    d, dmin = _f16(b, 80)[:, None], _f16(b, 82)[:, None]
    low, high = (sc & 0x0F).astype(F32), (sc >> 4).astype(F32)
    return q, d * low, -(dmin * high), (d, _ints(low), dmin, _ints(-high))


def _q3_k(b: Bytes) -> Parts:
    hmask, qs, s = b[:, 0:32], b[:, 32:96], b[:, 96:108]
    d = _f16(b, 108)[:, None]
    low = (s[:, 0:8].reshape(-1, 1, 8) >> np.array([0, 4], np.uint8).reshape(1, 2, 1)).reshape(
        -1, 16
    )
    high = s[:, 8:12].reshape(-1, 1, 4) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 4, 1)
    high = high.reshape(-1, 16)
    sc = ((low & np.uint8(0x0F)) | ((high & np.uint8(0x03)) << np.uint8(4))).astype(np.int8)
    signed = (sc - np.int8(32)).astype(np.int8)
    scale = d * signed.astype(F32)
    ql = (qs.reshape(-1, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 3
    qh = _bits(hmask, list(range(8)), 1) ^ np.uint8(1)  # a clear bit subtracts 4
    q = (ql.reshape(-1, 8, 32).astype(np.int8) - (qh << np.uint8(2)).astype(np.int8)).reshape(
        -1, 256
    )
    return q, scale, np.zeros_like(scale), (d, signed, None, None)


# GGUF type -> (bytes per block, values per block, reader, 4-bit values, per-block groups).
_READERS: dict[str, tuple[int, int, Callable[[Bytes], Parts], bool]] = {
    "Q4_0": (18, 32, _q4_0, True),
    "Q4_1": (20, 32, _q4_1, True),
    "Q4_K": (144, 256, _q4_k, True),
    "Q5_0": (22, 32, lambda b: _q5(b, False), False),
    "Q5_1": (24, 32, lambda b: _q5(b, True), False),
    "Q8_0": (34, 32, _q8_0, False),
    "Q2_K": (84, 256, _q2_k, False),
    "Q3_K": (110, 256, _q3_k, False),
    "Q5_K": (176, 256, _q5_k, False),
    "Q6_K": (210, 256, _q6_k, False),
}
EXACT_TYPES = (*_READERS, "F32", "F16", "BF16")


def decode(tensor: ReaderTensor, requantize: bool = False) -> Tensor:
    """One GGUFReader tensor, (rows, cols) as torch lays a linear's weight out, with its own
    numbers. A type not read here raises NotExactError, or is dequantized to float32 rows when
    `requantize` (the caller then quantizes it again, as asked)."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize

    kind = T(tensor.tensor_type)
    shape = [int(n) for n in reversed(tensor.shape)]  # GGUF lists the fastest dimension first
    rows = shape[0] if len(shape) > 1 else 1
    cols = shape[-1]
    raw = np.asarray(tensor.data)
    if len(shape) == 1:  # a vector: a norm's weights, kept in float32
        if kind.name not in EXACT_TYPES and not requantize:
            raise NotExactError(str(getattr(tensor, "name", "?")), kind.name)
        return np.asarray(dequantize(raw, kind), dtype=F32).reshape(cols)
    if kind.name in _READERS:
        size, per, read, four = _READERS[kind.name]
        blocks = np.ascontiguousarray(raw).view(np.uint8).reshape(-1, size)
        q, scale, offset, k = read(blocks)
        codes = np.ascontiguousarray(q).reshape(rows, cols)
        group = BLOCK if four else GROUP8
        reps = per // group // scale.shape[1]  # per-32 scales repeated for groups of 16
        scale = np.ascontiguousarray(np.repeat(scale, reps, axis=1) if reps != 1 else scale)
        offset = np.ascontiguousarray(np.repeat(offset, reps, axis=1) if reps != 1 else offset)
        scale = scale.astype(F32).reshape(rows, cols // group)
        offset = offset.astype(F32).reshape(rows, cols // group)
        factors = None if k is None else _factors(k, rows, cols, group, per)
        if four:
            return Blocks4(codes.astype(np.uint8), scale, offset, kind.name, factors)
        return Blocks8(codes.astype(np.int8), scale, offset, kind.name, factors)
    if kind == T.F32:
        return Floats(np.ascontiguousarray(raw.view(F32).reshape(rows, cols)), "F32")
    if kind == T.F16:
        return Floats(np.ascontiguousarray(raw.view(np.float16).reshape(rows, cols)), "F16")
    if kind == T.BF16:
        return Floats(np.ascontiguousarray(raw.view(np.uint16).reshape(rows, cols)), "BF16")
    if not requantize:
        raise NotExactError(str(getattr(tensor, "name", "?")), kind.name)
    values = np.asarray(dequantize(raw, kind), dtype=F32)
    return values.reshape(shape)


def _factors(k: KParts, rows: int, cols: int, group: int, per: int) -> Factors:
    """A tensor's K-quant factors, by row: d (rows, cols / 256) and the integers per group."""
    d, sc, dmin, mn = k
    reps = per // group // sc.shape[1]

    def ints(v: Int8s) -> Int8s:
        out: Int8s = np.ascontiguousarray(np.repeat(v, reps, axis=1) if reps != 1 else v)
        return out.reshape(rows, cols // group)

    def supers(v: Floats32) -> Floats32:
        return np.ascontiguousarray(v, dtype=F32).reshape(rows, cols // SUPER)

    if dmin is None or mn is None:
        return Factors(supers(d), ints(sc))
    return Factors(supers(d), ints(sc), supers(dmin), ints(mn))


def _unpermute(w: Tensor, heads: int) -> Tensor:
    """llama.cpp's converter reorders q and k rows for its interleaved rotary pairs; back to
    the Hugging Face order (halves), which the forward's rotary tables follow."""
    rows = w.shape[0]
    order = np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(rows)
    if isinstance(w, np.ndarray):
        return np.ascontiguousarray(w[order])
    return w.take_rows(order)


def _value(meta: Meta, key: str, default: float | str | None = None) -> object:
    """A metadata value (a number, a string, or a list of them per layer), else `default`;
    ModelLoadError where there is neither."""
    value: object = meta.get(key)
    if value is None:
        if default is None:
            raise ModelLoadError(f"the GGUF file has no {key}; it is not a LLaMA-family model")
        return default
    return value


def _number(meta: Meta, key: str, default: float | None = None) -> float:
    value = _value(meta, key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelLoadError(f"the GGUF file's {key} is {value!r}, not a number")
    return value


def _int(meta: Meta, key: str, default: int | None = None) -> int:
    return int(_number(meta, key, default))


def _text(meta: Meta, key: str, default: str | None = None) -> str:
    return str(_value(meta, key, default))


def _uniform(meta: Meta, key: str, default: int | None = None) -> int:
    """A count that may be given per layer: one value for every layer, or InexactError."""
    value = _value(meta, key, default)
    if isinstance(value, list):
        if len(set(value)) != 1:
            raise InexactError(f"{key} differs between layers, which the flat engine does not run")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ModelLoadError(f"the GGUF file's {key} is {value!r}, not a number")
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


def _rope(meta: Meta, arch: str, name: str) -> tuple[float, float]:
    """The rotary scale (1 / the linear factor) and attention factor llama.cpp applies;
    InexactError for a scaling it computes otherwise (YaRN, LongRoPE)."""
    kind = _text(meta, f"{arch}.rope.scaling.type", "linear")
    linear = _number(meta, f"{arch}.rope.scale_linear", 0.0)
    factor = _number(meta, f"{arch}.rope.scaling.factor", linear)
    if kind not in ("none", "linear"):
        raise InexactError(
            f"{name} uses {kind} rope scaling, which the flat engine does not compute"
        )
    scale = 1.0 if kind == "none" or factor == 0.0 else 1.0 / factor
    return scale, _number(meta, f"{arch}.rope.scaling.attn_factor", 1.0)


def open_gguf(path: Path, requantize: bool = False) -> tuple[LlamaShape, GGUFTensors]:
    """read_gguf's shape and tensors, each tensor read and decoded only when asked for (its
    type and name checked now)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    from samchat.models.gguf_header import read_header

    meta, table = read_header(path)  # the header alone (GGUFReader parses every token: seconds)
    arch = _text(meta, "general.architecture")
    if arch not in FAMILIES:
        raise InexactError(
            f"{path.name} is a {arch} model; the flat engine runs {', '.join(FAMILIES)} models"
        )
    heads = _uniform(meta, f"{arch}.attention.head_count")
    hidden = _int(meta, f"{arch}.embedding_length")
    head_dim = _int(meta, f"{arch}.attention.key_length", hidden // heads)
    values = _int(meta, f"{arch}.attention.value_length", head_dim)
    rotated = _int(meta, f"{arch}.rope.dimension_count", head_dim)
    if values != head_dim or rotated != head_dim:
        raise InexactError(
            f"{path.name} has keys of {head_dim}, values of {values} and {rotated} rotated "
            "dimensions; the flat engine runs heads that are all three alike"
        )
    context = _int(meta, f"{arch}.context_length")
    # A sliding window (Mistral) attends to the last W positions: within W, every position
    # attends to all before it, so the context stops there and every row is the file's model.
    window = _int(meta, f"{arch}.attention.sliding_window", 0)
    if 0 < window < context:
        context = window
    scale, attn = _rope(meta, arch, path.name)
    shape = LlamaShape(
        layers=_uniform(meta, f"{arch}.block_count"),
        hidden=hidden,
        ffn=_uniform(meta, f"{arch}.feed_forward_length"),
        heads=heads,
        kv_heads=_uniform(meta, f"{arch}.attention.head_count_kv", heads),
        head_dim=head_dim,
        vocab=0,
        context=context,
        eps=_number(meta, f"{arch}.attention.layer_norm_rms_epsilon"),
        rope_base=_number(meta, f"{arch}.rope.freq_base", 10000.0),
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
    found: dict[str, _Entry] = {}
    for t in table:
        name = t.name
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
        try:
            ggml = GGMLQuantizationType(t.kind)
            per, size = GGML_QUANT_SIZES[ggml]
        except (ValueError, KeyError):
            raise ModelLoadError(
                f"{path.name}: tensor {name} has an unknown type {t.kind}"
            ) from None
        if ggml.name not in EXACT_TYPES and not requantize:  # refused before reading
            raise NotExactError(name, ggml.name)
        if not t.dims or t.dims[0] % per:
            raise ModelLoadError(f"{path.name}: tensor {name} has rows of another size")
        found[key] = _Entry(name, ggml, t.dims, t.at, per, size)
    embed = found.get("embed")
    if embed is None or "norm" not in found:
        raise ModelLoadError(f"{path.name} has no token embedding or output norm")
    if arch == "qwen3" and any(f"{i}.q_norm" not in found for i in range(shape.layers)):
        raise ModelLoadError(f"{path.name} is a qwen3 model without its q/k norms")
    shape.vocab = embed.rows
    return shape, GGUFTensors(path, found, shape, FAMILIES[arch], requantize)


def read_gguf(path: Path, requantize: bool = False) -> tuple[LlamaShape, dict[str, Tensor]]:
    """The shape and the tensors of a llama, qwen2 or qwen3 GGUF file, named as shape.py names
    them: "embed", "norm", "out" (absent when tied), "rope_freqs" (where the file has one) and
    "<layer>.<q|k|v|o|gate|up|down|attn_norm|ffn_norm|q_bias|...|q_norm|k_norm>". Every tensor
    of the file is one of these: any other is an InexactError, never dropped."""
    shape, tensors = open_gguf(path, requantize)
    return shape, dict(tensors.items())


# The types GGUFReader (and decode) see as their own values, not as blocks of bytes.
_OWN_TYPES = {
    "F32": np.float32,
    "F16": np.float16,
    "F64": np.float64,
    "I8": np.int8,
    "I16": np.int16,
    "I32": np.int32,
    "I64": np.int64,
}


class _Entry:
    """Where a tensor lies in the file, and its type and shape (its data is read when asked
    for: the reader's map is never touched, so none of its pages stay resident)."""

    def __init__(
        self,
        name: str,
        kind: GGMLQuantizationType,
        dims: tuple[int, ...],
        at: int,
        per: int,
        block: int,
    ) -> None:
        self.name = name
        self.kind = kind
        self.dims = list(dims)  # GGUF's order: the fastest first
        self.at = at
        self.size = math.prod(dims) // per * block
        # As GGUFReader lays a tensor out: float and integer types as their own values, any
        # other as the bytes of each row's blocks.
        own = _OWN_TYPES.get(kind.name)
        self.dtype = np.dtype(own if own is not None else np.uint8)
        row = [dims[0] if own is not None else dims[0] // per * block]
        self.data_shape = tuple(reversed([*row, *dims[1:]])) if len(dims) > 1 else tuple(row)

    @property
    def rows(self) -> int:
        return self.dims[-1] if len(self.dims) > 1 else 1

    def read(self, path: Path, start: int, stop: int) -> Any:
        """Rows [start, stop) as decode() takes a reader's tensor."""
        per_row = self.size // self.rows
        count = (stop - start) * per_row
        raw = np.fromfile(path, dtype=np.uint8, count=count, offset=self.at + start * per_row)
        if len(raw) != count:
            raise ModelLoadError(f"{path.name} is cut short inside tensor {self.name}")
        dims = [*self.dims[:-1], stop - start] if len(self.dims) > 1 else self.dims
        shape = (stop - start, *self.data_shape[1:]) if len(self.dims) > 1 else self.data_shape
        data = raw.view(self.dtype).reshape(shape)
        return SimpleNamespace(name=self.name, tensor_type=self.kind, shape=dims, data=data)


class GGUFTensors(Mapping[str, Tensor]):
    """A GGUF file's tensors by read_gguf's names, each read from the file and decoded when
    asked for, so that a conversion holds one layer at a time, never the whole model."""

    def __init__(
        self,
        path: Path,
        found: dict[str, _Entry],
        shape: LlamaShape,
        rotated: bool,
        requantize: bool,
    ) -> None:
        self.path = path
        self._found = found
        self._shape = shape
        self._rotated = rotated  # llama's converter reordered q and k rows (see _unpermute)
        self._requantize = requantize

    def __getitem__(self, key: str) -> Tensor:
        entry = self._found[key]
        w = decode(entry.read(self.path, 0, entry.rows), self._requantize)
        if self._rotated and key.split(".")[-1] in _ROTATED:
            heads = self._shape.heads if ".q" in key else self._shape.kv_heads
            w = _unpermute(w, heads)
        return w

    def __iter__(self) -> Iterator[str]:
        return iter(self._found)

    def __len__(self) -> int:
        return len(self._found)

    def kinds(self) -> set[str]:
        """The GGUF types of the file's matrices."""
        return {e.kind.name for e in self._found.values() if len(e.dims) > 1}

    def row_chunks(self, key: str, rows: int) -> Iterator[Tensor]:
        """Tensor `key` (not a rotated one) decoded `rows` rows at a time."""
        entry = self._found[key]
        for start in range(0, entry.rows, rows):
            part = entry.read(self.path, start, min(start + rows, entry.rows))
            yield decode(part, self._requantize)
