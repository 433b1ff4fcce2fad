"""GGUF files of the families the flat engine runs, made from a llama GGUF (issue 60's proof).

    python scripts/gguf_redress.py SRC.gguf OUT_DIR [--seed N]

re-dresses SRC (e.g. the bundled SmolLM2 Q4_1 file) three ways, its tensors' bytes kept:
- llama3.gguf: llama with a Llama-3 `rope_freqs` tensor, the factors llama.cpp's converter
  derives from Llama 3.2's llama3 rope scaling (factor 32, low 1, high 4, original context
  8192). That converter writes no rope scaling key for llama3, only this tensor;
- qwen2.gguf: qwen2 (NEOX rotary: q and k rows back in halves order) with small seeded q/k/v
  biases;
- qwen3.gguf: qwen3 with seeded per-head q/k RMS norm weights.

The tokenizer keys stay as they are: SmolLM2's vocabulary with its own split
(`tokenizer.ggml.pre = smollm`). A split belongs to the vocabulary it was trained with, not to
the architecture, and llama.cpp and samchat both pick it by that key (a real Qwen2.5 file says
`qwen2`, with Qwen's vocabulary).

`tiny(path, family, ...)` writes a small random model of a family in Q4_0/Q4_1 with the
bundled tokenizer, as the tests use: "llama", "llama3" (rope_freqs), "linear" (linear rope
scaling), "yarn" (YaRN, which the flat engine refuses), "qwen2", "qwen3".
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

FAMILIES = ("llama3", "qwen2", "qwen3")
TINY = ("llama", "llama3", "linear", "yarn", "qwen2", "qwen3")


def llama3_factors(
    head_dim: int, base: float, factor: float = 32.0
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """The rope_freqs llama.cpp's converter writes for Llama 3's rope scaling: Llama 3.2's
    factor 32 by default (Llama 3.1's is 8)."""
    low, high, old = 1.0, 4.0, 8192.0
    out = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / base ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def halves(rows: np.ndarray[Any, Any], heads: int) -> np.ndarray[Any, Any]:
    """q or k rows from llama.cpp's interleaved (llama) order back to halves (NEOX) order."""
    n = rows.shape[0]
    order = np.arange(n).reshape(heads, n // heads // 2, 2).swapaxes(1, 2).reshape(n)
    return np.ascontiguousarray(rows[order])


def _copy_fields(reader: Any, writer: Any, arch: str) -> None:
    """Every key but the file's own bookkeeping, the architecture's keys renamed."""
    from gguf import GGUFValueType

    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        name = f"{arch}.{key.split('.', 1)[1]}" if key.startswith("llama.") else key
        kind = GGUFValueType(field.types[0])
        sub = GGUFValueType(field.types[1]) if kind == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), kind, sub_type=sub)


def redress(src: Path, dst: Path, family: str, seed: int = 0) -> None:
    """src (a llama GGUF) as `family`: llama3, qwen2 or qwen3."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(FAMILIES)}")
    reader = GGUFReader(src)
    arch = "llama" if family == "llama3" else family
    heads = int(reader.fields["llama.attention.head_count"].contents())
    kv_heads = int(reader.fields["llama.attention.head_count_kv"].contents())
    hidden = int(reader.fields["llama.embedding_length"].contents())
    head_dim = hidden // heads
    base = float(reader.fields["llama.rope.freq_base"].contents())
    rng = np.random.default_rng(seed)
    writer = GGUFWriter(str(dst), arch)
    _copy_fields(reader, writer, arch)
    f32 = GGMLQuantizationType.F32
    for t in reader.tensors:
        data = np.asarray(t.data)
        name = str(t.name)
        part = name.split(".")[2] if name.startswith("blk.") else ""
        if arch != "llama" and part in ("attn_q", "attn_k"):
            data = halves(data, heads if part == "attn_q" else kv_heads)
        writer.add_tensor(name, data, raw_dtype=GGMLQuantizationType(t.tensor_type))
        if family == "qwen2" and part in ("attn_q", "attn_k", "attn_v"):
            width = (heads if part == "attn_q" else kv_heads) * head_dim
            bias = (0.02 * rng.standard_normal(width)).astype(np.float32)
            writer.add_tensor(name.replace(".weight", ".bias"), bias, raw_dtype=f32)
        if family == "qwen3" and part in ("attn_q", "attn_k"):
            norm = (1.0 + 0.1 * rng.standard_normal(head_dim)).astype(np.float32)
            writer.add_tensor(name.replace(part, f"{part}_norm"), norm, raw_dtype=f32)
    if family == "llama3":
        writer.add_tensor("rope_freqs.weight", llama3_factors(head_dim, base), raw_dtype=f32)
    _finish(writer)


def _finish(writer: Any) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def tiny(
    dst: Path,
    family: str,
    tokenizer_from: Path,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 128,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 256,
    extra: dict[str, np.ndarray[Any, Any]] | None = None,
    keys: dict[str, int] | None = None,
) -> None:
    """A small random model of `family` (TINY) with the tokenizer of tokenizer_from: linears
    in Q4_0 and Q4_1 alternately, the embedding (tied output) in Q8_0, norms in F32. `extra`
    tensors are added as they are (F32), e.g. one the flat engine does not compute; `keys`
    are the architecture's integer keys added (e.g. attention.sliding_window)."""
    from gguf import GGMLQuantizationType as T
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import quantize

    if family not in TINY:
        raise ValueError(f"unknown family {family!r}; one of {', '.join(TINY)}")
    arch = family if family in ("qwen2", "qwen3") else "llama"
    source = GGUFReader(tokenizer_from)
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads
    writer = GGUFWriter(str(dst), arch)
    writer.add_name(f"tiny {family}")
    for key, field in source.fields.items():
        if key.startswith("tokenizer."):
            kind = GGUFValueType(field.types[0])
            sub = GGUFValueType(field.types[1]) if kind == GGUFValueType.ARRAY else None
            writer.add_key_value(key, field.contents(), kind, sub_type=sub)
    vocab = len(source.fields["tokenizer.ggml.tokens"].contents())
    writer.add_uint32(f"{arch}.block_count", layers)
    writer.add_uint32(f"{arch}.context_length", 512)
    writer.add_uint32(f"{arch}.embedding_length", hidden)
    writer.add_uint32(f"{arch}.feed_forward_length", ffn)
    writer.add_uint32(f"{arch}.attention.head_count", heads)
    writer.add_uint32(f"{arch}.attention.head_count_kv", kv_heads)
    writer.add_uint32(f"{arch}.rope.dimension_count", head_dim)
    writer.add_float32(f"{arch}.rope.freq_base", 10000.0)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_uint32(f"{arch}.vocab_size", vocab)
    for key, value in (keys or {}).items():
        writer.add_uint32(f"{arch}.{key}", value)
    if family == "linear":
        writer.add_string(f"{arch}.rope.scaling.type", "linear")
        writer.add_float32(f"{arch}.rope.scaling.factor", 4.0)
    if family == "yarn":
        writer.add_string(f"{arch}.rope.scaling.type", "yarn")
        writer.add_float32(f"{arch}.rope.scaling.factor", 4.0)
        writer.add_uint32(f"{arch}.rope.scaling.original_context_length", 128)

    def add(name: str, values: np.ndarray[Any, Any], kind: T) -> None:
        values = values.astype(np.float32)
        raw = quantize(values, kind) if kind != T.F32 else values
        writer.add_tensor(name, np.asarray(raw), raw_dtype=kind)

    def linear(rows: int, cols: int) -> np.ndarray[Any, Any]:
        return rng.standard_normal((rows, cols)).astype(np.float32) / math.sqrt(cols)

    def norm(n: int) -> np.ndarray[Any, Any]:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    add("token_embd.weight", rng.standard_normal((vocab, hidden)).astype(np.float32), T.Q8_0)
    add("output_norm.weight", norm(hidden), T.F32)
    if family == "llama3":
        # Factors far from 1 on every frequency, so that ignoring them would show.
        add("rope_freqs.weight", rng.uniform(0.25, 8.0, head_dim // 2).astype(np.float32), T.F32)
    widths = {"attn_q": heads * head_dim, "attn_k": kv_heads * head_dim}
    widths["attn_v"] = widths["attn_k"]
    for i in range(layers):
        kinds = (T.Q4_0, T.Q4_1)
        add(f"blk.{i}.attn_norm.weight", norm(hidden), T.F32)
        add(f"blk.{i}.ffn_norm.weight", norm(hidden), T.F32)
        for j, (part, width) in enumerate(widths.items()):
            add(f"blk.{i}.{part}.weight", linear(width, hidden), kinds[(i + j) % 2])
            if family == "qwen2":
                add(f"blk.{i}.{part}.bias", 0.5 * rng.standard_normal(width), T.F32)
        if family == "qwen3":
            add(f"blk.{i}.attn_q_norm.weight", norm(head_dim), T.F32)
            add(f"blk.{i}.attn_k_norm.weight", norm(head_dim), T.F32)
        add(f"blk.{i}.attn_output.weight", linear(hidden, heads * head_dim), kinds[i % 2])
        add(f"blk.{i}.ffn_gate.weight", linear(ffn, hidden), kinds[(i + 1) % 2])
        add(f"blk.{i}.ffn_up.weight", linear(ffn, hidden), kinds[i % 2])
        add(f"blk.{i}.ffn_down.weight", linear(hidden, ffn), kinds[(i + 1) % 2])
    for name, values in (extra or {}).items():
        add(name, values.astype(np.float32), T.F32)
    _finish(writer)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path, help="a llama GGUF file")
    parser.add_argument("out", type=Path, help="the folder the three files go to")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        dst = args.out / f"{args.src.stem}-{family}.gguf"
        redress(args.src, dst, family, args.seed)
        print(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
