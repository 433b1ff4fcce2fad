"""Random-weight GGUFs in the shapes of the models people run (issue 61), to measure the engines
on: Llama-3.2-1B, Qwen2.5-1.5B, Llama-3.2-3B and Llama-3.1-8B, each with its real hidden size,
layers, heads, KV heads, FFN size, rope settings and vocabulary size (the bundled tokenizer,
padded to that vocabulary with tokens "[padN]"), quantized by llama.cpp's own quantizer.

Every tensor is drawn from a generator seeded by (seed, its index), so a file is the same every
time it is made; a model's greedy replies are arbitrary, but deterministic. The F16 file the
types are quantized from is written one tensor at a time and removed afterwards (--keep-base
keeps it). Free disk and memory are checked first: a shape that would not fit is skipped, with
one line saying why.

    python scripts/gguf_shapes.py OUT_DIR [--shapes llama-3.2-1b,...] [--types Q4_K_M,Q4_0]
                                  [--seed 0] [--threads 1] [--keep-base]
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Its sibling scripts, however this one is run (mypy, too, sees scripts/ as top-level modules).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gguf_redress import llama3_factors
from gguf_variants import FTYPES, quantize

TYPES = ("Q4_K_M", "Q4_0")
# Bytes per weight of each type in files llama.cpp writes (blocks with their scales, and the
# Q6_K output some of them carry), a little above the real figure: for the disk check.
BYTES_PER_WEIGHT = {"Q4_0": 0.60, "Q4_1": 0.65, "Q4_K_M": 0.63, "Q5_K_M": 0.73, "Q6_K": 0.85}
BYTES_PER_WEIGHT |= {"Q8_0": 1.10, "F16": 2.0, "BF16": 2.0, "F32": 4.0}
GB = 1e9
# Rows of a tensor drawn at once: bounds the float32 scratch to about 100 MB on the widest.
CHUNK_VALUES = 1 << 25


@dataclass(frozen=True)
class Shape:
    """A model's shape, from its public config."""

    name: str
    arch: str  # the GGUF architecture: "llama" or "qwen2"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    rope_base: float
    rms_eps: float
    context: int
    tied: bool  # the output projection is the embedding
    llama3_factor: float | None = None  # Llama 3's rope scaling, as a rope_freqs tensor
    qkv_bias: bool = False  # Qwen2's q/k/v biases

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def tensors(self) -> list[tuple[str, tuple[int, ...]]]:
        """Every tensor's GGUF name and (rows, cols) shape, in file order."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (self.vocab, h))]
        if self.llama3_factor is not None:
            out.append(("rope_freqs.weight", (self.head_dim // 2,)))
        for i in range(self.layers):
            b = f"blk.{i}"
            out += [(f"{b}.attn_norm.weight", (h,)), (f"{b}.attn_q.weight", (h, h))]
            out += [(f"{b}.attn_k.weight", (kv, h)), (f"{b}.attn_v.weight", (kv, h))]
            if self.qkv_bias:
                out += [(f"{b}.attn_q.bias", (h,)), (f"{b}.attn_k.bias", (kv,))]
                out += [(f"{b}.attn_v.bias", (kv,))]
            out += [(f"{b}.attn_output.weight", (h, h)), (f"{b}.ffn_norm.weight", (h,))]
            out += [(f"{b}.ffn_gate.weight", (self.ffn, h)), (f"{b}.ffn_up.weight", (self.ffn, h))]
            out += [(f"{b}.ffn_down.weight", (h, self.ffn))]
        out.append(("output_norm.weight", (h,)))
        if not self.tied:
            out.append(("output.weight", (self.vocab, h)))
        return out

    @property
    def parameters(self) -> int:
        return sum(math.prod(shape) for _, shape in self.tensors())

    @property
    def widest(self) -> int:
        """The values of the largest tensor."""
        return max(math.prod(shape) for _, shape in self.tensors())


SHAPES = {
    s.name: s
    for s in (
        Shape(
            "llama-3.2-1b",
            "llama",
            2048,
            16,
            32,
            8,
            8192,
            128256,
            500000.0,
            1e-5,
            131072,
            tied=True,
            llama3_factor=32.0,
        ),
        Shape(
            "qwen2.5-1.5b",
            "qwen2",
            1536,
            28,
            12,
            2,
            8960,
            151936,
            1000000.0,
            1e-6,
            32768,
            tied=True,
            qkv_bias=True,
        ),
        Shape(
            "llama-3.2-3b",
            "llama",
            3072,
            28,
            24,
            8,
            8192,
            128256,
            500000.0,
            1e-5,
            131072,
            tied=True,
            llama3_factor=32.0,
        ),
        Shape(
            "llama-3.1-8b",
            "llama",
            4096,
            32,
            32,
            8,
            14336,
            128256,
            500000.0,
            1e-5,
            131072,
            tied=False,
            llama3_factor=8.0,
        ),
    )
}


def padded_tokenizer(vocab: int) -> dict[str, Any]:
    """The bundled tokenizer's keys, its vocabulary padded to `vocab` with normal tokens
    "[padN]" (normal, not control or user-defined: llama.cpp scans those in every prompt)."""
    from gguf import GGUFReader

    from samchat.models.default import bundled_gguf

    reader = GGUFReader(bundled_gguf())
    out: dict[str, Any] = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    kinds = list(reader.fields["tokenizer.ggml.token_type"].contents())
    if vocab < len(tokens):
        raise ValueError(f"vocabulary {vocab} is smaller than the bundled {len(tokens)}")
    out["tokenizer.ggml.tokens"] = tokens + [f"[pad{i}]" for i in range(len(tokens), vocab)]
    out["tokenizer.ggml.token_type"] = kinds + [1] * (vocab - len(kinds))
    return out


def _values(shape: Shape, name: str, dims: tuple[int, ...], rng: Any) -> Iterator[np.ndarray]:
    """A tensor's values, in pieces of whole rows: norms near one, small biases, the embedding
    at deviation 0.5 (logits well apart, so greedy choices are not near ties) and linears at
    1/sqrt(cols), so activations stay near one through the layers."""
    if name == "rope_freqs.weight":
        assert shape.llama3_factor is not None
        yield llama3_factors(shape.head_dim, shape.rope_base, shape.llama3_factor)
        return
    if len(dims) == 1:
        scale, offset = (0.02, 0.0) if name.endswith(".bias") else (0.1, 1.0)
        yield (offset + scale * rng.standard_normal(dims[0], dtype=np.float32)).astype(np.float32)
        return
    rows, cols = dims
    deviation = np.float32(0.5 if name in ("token_embd.weight", "output.weight") else cols**-0.5)
    step = max(1, CHUNK_VALUES // cols)
    for start in range(0, rows, step):
        n = min(step, rows - start)
        yield rng.standard_normal((n, cols), dtype=np.float32) * deviation


def write_base(shape: Shape, path: Path, seed: int = 0) -> Path:
    """The F16 GGUF of `shape` (norms, biases and rope factors in F32), one tensor at a time."""
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

    writer = GGUFWriter(str(path), shape.arch)
    a = shape.arch
    writer.add_name(f"random {shape.name} shape")
    writer.add_uint32(f"{a}.block_count", shape.layers)
    writer.add_uint32(f"{a}.context_length", shape.context)
    writer.add_uint32(f"{a}.embedding_length", shape.hidden)
    writer.add_uint32(f"{a}.feed_forward_length", shape.ffn)
    writer.add_uint32(f"{a}.attention.head_count", shape.heads)
    writer.add_uint32(f"{a}.attention.head_count_kv", shape.kv_heads)
    writer.add_uint32(f"{a}.rope.dimension_count", shape.head_dim)
    writer.add_float32(f"{a}.rope.freq_base", shape.rope_base)
    writer.add_float32(f"{a}.attention.layer_norm_rms_epsilon", shape.rms_eps)
    writer.add_uint32(f"{a}.vocab_size", shape.vocab)
    writer.add_file_type(1)
    for key, field in padded_tokenizer(shape.vocab).items():
        if isinstance(field, list):
            item = GGUFValueType.STRING if isinstance(field[0], str) else GGUFValueType.INT32
            writer.add_key_value(key, field, GGUFValueType.ARRAY, item)
        else:
            kind = GGUFValueType(field.types[0])
            sub = GGUFValueType(field.types[-1]) if kind == GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), kind, sub)
    f16, f32 = GGMLQuantizationType.F16, GGMLQuantizationType.F32
    layout = shape.tensors()
    for name, dims in layout:
        dtype = np.dtype(np.float16 if len(dims) == 2 else np.float32)
        raw = f16 if len(dims) == 2 else f32
        writer.add_tensor_info(name, dims, dtype, math.prod(dims) * dtype.itemsize, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for index, (name, dims) in enumerate(layout):
        rng = np.random.default_rng([seed, index])
        pieces = [p.astype(np.float16 if len(dims) == 2 else np.float32) for p in
                  _values(shape, name, dims, rng)]  # fmt: skip
        writer.write_tensor_data(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))
        del pieces
    writer.close()
    return path


def _free_memory() -> int | None:
    """MemAvailable from /proc/meminfo, in bytes (None where there is none)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def needs(shape: Shape, types: Iterable[str]) -> tuple[float, float]:
    """Disk and memory (bytes) making `shape` in `types` takes: the F16 base and every file;
    the widest tensor as float32 and float16 pieces in the writer, and as float32 beside its
    quantized copy in llama.cpp's quantizer, plus a gigabyte for the rest."""
    files = sum(BYTES_PER_WEIGHT.get(t, 2.0) * shape.parameters for t in types)
    disk = 2.0 * shape.parameters + files
    memory = 1 * GB + shape.widest * (4 + 2 + 4)
    return disk, memory


def plan(
    shapes: Iterable[Shape], types: list[str], free_disk: int, memory: int | None, where: Path
) -> tuple[list[Shape], list[str]]:
    """The shapes that fit `free_disk` bytes in `where` and `memory` bytes available (None:
    unknown), one after another (the files kept add up; the F16 base is removed after each),
    and one line for each that does not."""
    chosen: list[Shape] = []
    skipped: list[str] = []
    for shape in shapes:
        disk, mem = needs(shape, types)
        if disk > free_disk:
            skipped.append(
                f"skipped {shape.name}: needs {disk / GB:.1f} GB of disk, "
                f"{free_disk / GB:.1f} GB free in {where}"
            )
        elif memory is not None and mem > memory:
            skipped.append(
                f"skipped {shape.name}: needs {mem / GB:.1f} GB of memory, "
                f"{memory / GB:.1f} GB available"
            )
        else:
            chosen.append(shape)
            free_disk -= int(disk - 2.0 * shape.parameters)
    return chosen, skipped


def make(
    shape: Shape,
    out_dir: Path,
    types: Iterable[str] = TYPES,
    seed: int = 0,
    threads: int = 1,
    keep_base: bool = False,
) -> dict[str, Path]:
    """`shape` in each of `types`, as OUT_DIR/<shape>-<type>.gguf (an existing one is kept)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / f"{shape.name}-F16.gguf"
    out: dict[str, Path] = {}
    wanted = {t: out_dir / f"{shape.name}-{t}.gguf" for t in types}
    missing = {t: p for t, p in wanted.items() if not p.exists() and t != "F16"}
    if missing or ("F16" in wanted and not base.exists()):
        if not base.exists():
            partial = base.with_suffix(".part")
            write_base(shape, partial, seed)
            partial.replace(base)
        for kind, target in missing.items():
            partial = target.with_suffix(".part")
            quantize(base, partial, kind, threads)
            partial.replace(target)
    for kind, target in wanted.items():
        out[kind] = base if kind == "F16" else target
    if not keep_base and "F16" not in wanted and base.exists():
        base.unlink()
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated")
    parser.add_argument("--types", default=",".join(TYPES), help="comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp's quantizer's")
    parser.add_argument("--keep-base", action="store_true", help="keep the F16 file")
    args = parser.parse_args(argv)
    names = [s.strip() for s in args.shapes.split(",") if s.strip()]
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    for name in names:
        if name not in SHAPES:
            print(f"error: unknown shape {name}; use {', '.join(SHAPES)}", file=sys.stderr)
            return 2
    for kind in types:
        if kind not in FTYPES:
            print(f"error: unknown type {kind}; use {', '.join(FTYPES)}", file=sys.stderr)
            return 2
    if args.threads < 1:
        print("error: --threads must be at least 1", file=sys.stderr)
        return 2
    args.out_dir.mkdir(parents=True, exist_ok=True)
    free_disk = shutil.disk_usage(args.out_dir).free
    shapes = [SHAPES[n] for n in names]
    chosen, skipped = plan(shapes, types, free_disk, _free_memory(), args.out_dir)
    for line in skipped:
        print(line)
    for shape in chosen:
        made = make(shape, args.out_dir, types, args.seed, args.threads, args.keep_base)
        for kind, path in made.items():
            print(f"{shape.name}\t{kind}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
