"""The proof files of issue 60: the bundled model in the GGUF types people download, made by
llama.cpp's own quantizer, to compare the flat engine with llama.cpp on (`samchat bench
perplexity --model FILE`).

The bundled Q4_1 weights are dequantized to float32 and given a little seeded noise, so that
they no longer sit on a 4-bit grid (a file quantized from them would otherwise hold the Q4_1
numbers again), written as an F32 GGUF with the bundled tokenizer, then quantized into each
type asked for.

    python scripts/gguf_variants.py OUT_DIR [--types Q4_0,Q4_K_M,...] [--seed 0]

`write_variants(out_dir, types)` and `tiny_variants(out_dir, types)` (a few layers of random
weights in the bundled model's architecture, for the tests) are importable."""

from __future__ import annotations

import argparse
import ctypes
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

# The llama.cpp file types (llama_ftype) by the names llama-quantize uses.
FTYPES = {
    "F32": 0,
    "F16": 1,
    "Q4_0": 2,
    "Q4_1": 3,
    "Q8_0": 7,
    "Q5_0": 8,
    "Q5_1": 9,
    "Q2_K": 10,
    "Q3_K_M": 12,
    "Q4_K_M": 15,
    "Q5_K_M": 17,
    "Q6_K": 18,
    "BF16": 32,
}
# Issue 60's proof files.
PROOF_TYPES = ("Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "F16")
# Noise added to the bundled weights: a fraction of each tensor's standard deviation, enough
# to move values off the 4-bit grid (a Q4_1 step is about a fifth of a deviation).
NOISE = 0.05


def _bundled() -> Path:
    from samchat.models.default import bundled_gguf

    return bundled_gguf()


def _copy_metadata(reader: Any, writer: Any, skip: Iterable[str] = ()) -> None:
    """Every key of `reader` but the file's own (GGUF.*, the architecture, the file type)."""
    from gguf import GGUFValueType

    dropped = {"general.architecture", "general.file_type", *skip}
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in dropped:
            continue
        kind = GGUFValueType(field.types[0])
        sub = GGUFValueType(field.types[-1]) if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub)


def write_f32(path: Path, tensors: dict[str, np.ndarray[Any, Any]], meta: dict[str, Any]) -> Path:
    """An F32 LLaMA GGUF of `tensors` (GGUF names, torch's (rows, cols) layout) with the
    bundled model's tokenizer and metadata, overridden by `meta` (ints, floats, lists)."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(_bundled())
    writer = GGUFWriter(str(path), "llama")
    _copy_metadata(reader, writer, skip=meta)
    for key, value in meta.items():
        if isinstance(value, list):
            item = GGUFValueType.STRING if isinstance(value[0], str) else GGUFValueType.INT32
            writer.add_key_value(key, value, GGUFValueType.ARRAY, item)
        else:
            kind = GGUFValueType.FLOAT32 if isinstance(value, float) else GGUFValueType.UINT32
            writer.add_key_value(key, value, kind)
    writer.add_file_type(0)
    for name, value in tensors.items():
        writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def quantize(source: Path, target: Path, kind: str, threads: int = 2) -> Path:
    """`source` quantized by llama.cpp's own quantizer into `kind` (a key of FTYPES), on
    `threads` threads (the result is the same on any number)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[kind]
    params.nthread = threads
    params.allow_requantize = True
    done = llama_cpp.llama_model_quantize(
        str(source).encode(), str(target).encode(), ctypes.byref(params)
    )
    if done != 0:
        raise RuntimeError(f"llama.cpp could not quantize {source.name} into {kind}")
    return target


def _variants(base: Path, out_dir: Path, stem: str, types: Iterable[str]) -> dict[str, Path]:
    out = {"F32": base} if "F32" in types else {}
    for kind in types:
        if kind != "F32":
            out[kind] = quantize(base, out_dir / f"{stem}-{kind}.gguf", kind)
    return out


def write_variants(
    out_dir: Path, types: Iterable[str] = PROOF_TYPES, seed: int = 0
) -> dict[str, Path]:
    """The bundled model dequantized, with seeded noise, quantized into each of `types`."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    reader = GGUFReader(_bundled())
    tensors: dict[str, np.ndarray[Any, Any]] = {}
    for t in reader.tensors:
        shape = [int(n) for n in reversed(t.shape)]
        values = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if values.ndim > 1:  # the norms stay as they are
            values = values + rng.standard_normal(values.shape).astype(np.float32) * (
                NOISE * float(values.std())
            )
        tensors[str(t.name)] = values
    base = write_f32(out_dir / "smollm2-noisy-F32.gguf", tensors, {})
    return _variants(base, out_dir, "smollm2-noisy", list(types))


def tiny_tensors(
    layers: int = 2,
    hidden: int = 256,
    ffn: int = 512,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 49152,
    seed: int = 0,
) -> dict[str, np.ndarray[Any, Any]]:
    """Random LLaMA weights (GGUF names, tied embedding), scaled so activations stay near one."""
    rng = np.random.default_rng(seed)
    hd = hidden // heads

    def matrix(rows: int, cols: int) -> np.ndarray[Any, Any]:
        scale = np.float32(1.0 / np.sqrt(cols))
        return rng.standard_normal((rows, cols), dtype=np.float32) * scale

    def norm(n: int) -> np.ndarray[Any, Any]:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    out = {"token_embd.weight": (0.5 * rng.standard_normal((vocab, hidden))).astype(np.float32)}
    for i in range(layers):
        out |= {
            f"blk.{i}.attn_norm.weight": norm(hidden),
            f"blk.{i}.attn_q.weight": matrix(heads * hd, hidden),
            f"blk.{i}.attn_k.weight": matrix(kv_heads * hd, hidden),
            f"blk.{i}.attn_v.weight": matrix(kv_heads * hd, hidden),
            f"blk.{i}.attn_output.weight": matrix(hidden, heads * hd),
            f"blk.{i}.ffn_norm.weight": norm(hidden),
            f"blk.{i}.ffn_gate.weight": matrix(ffn, hidden),
            f"blk.{i}.ffn_up.weight": matrix(ffn, hidden),
            f"blk.{i}.ffn_down.weight": matrix(hidden, ffn),
        }
    out["output_norm.weight"] = norm(hidden)
    return out


def small_vocab(vocab: int) -> dict[str, Any]:
    """The bundled tokenizer's first `vocab` tokens and the merges among them (the special
    tokens come first)."""
    from gguf import GGUFReader

    reader = GGUFReader(_bundled())
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()[:vocab]
    kinds = reader.fields["tokenizer.ggml.token_type"].contents()[:vocab]
    known = set(tokens)
    merges = [
        m
        for m in reader.fields["tokenizer.ggml.merges"].contents()
        if all(part in known for part in m.split(" ")) and m.replace(" ", "") in known
    ]
    return {
        "llama.vocab_size": vocab,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": kinds,
        "tokenizer.ggml.merges": merges,
    }


def tiny_variants(
    out_dir: Path,
    types: Iterable[str],
    layers: int = 2,
    hidden: int = 256,
    ffn: int = 512,
    vocab: int = 2048,
) -> dict[str, Path]:
    """A few layers of random weights in the bundled model's architecture and tokenizer, cut
    to its first `vocab` tokens (rows of 256 and 512 values, which every K-quant takes),
    quantized into each of `types`. The cut tokenizer reads ids, not text."""
    heads, kv_heads = hidden // 64, hidden // 128
    meta: dict[str, Any] = {
        **small_vocab(vocab),
        "llama.block_count": layers,
        "llama.embedding_length": hidden,
        "llama.feed_forward_length": ffn,
        "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv_heads,
        "llama.rope.dimension_count": hidden // heads,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = tiny_tensors(layers, hidden, ffn, heads, kv_heads, vocab)
    base = write_f32(out_dir / "tiny-F32.gguf", tensors, meta)
    return _variants(base, out_dir, "tiny", list(types))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--types", default=",".join(PROOF_TYPES), help="comma-separated")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in types if t not in FTYPES]
    if unknown:
        print(f"error: unknown type {unknown[0]}; use {', '.join(FTYPES)}", file=sys.stderr)
        return 2
    for kind, path in write_variants(args.out_dir, types, args.seed).items():
        print(f"{kind}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
