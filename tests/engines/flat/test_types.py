"""The flat engine on every GGUF type it reads, each with its own numbers: tiny files of random
weights in the bundled model's architecture, quantized by llama.cpp's own quantizer (the
session's `gguf_types`). Every weight equals gguf's (llama.cpp's) dequantization; the logits
agree with llama.cpp's on the same file; every row of a verification equals the one-token
step; the tiles agree with the dequantized weights in float64 on this CPU's build and on the
AVX2 one; a type it cannot compute exactly is refused by name unless requantizing is asked."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from samchat.engines.flat import packed, quant
from samchat.engines.flat.engine import FlatEngine
from samchat.engines.flat.exactness import REQUANTIZED, NotExactError
from samchat.engines.flat.forward import FlatModel
from samchat.engines.flat.gguf_weights import EXACT_TYPES, decode, read_gguf
from samchat.engines.flat.native import build
from samchat.engines.layout import TreeLayout

VOCAB = 2048  # the tiny files' tokenizer: the bundled one's first tokens
# Logits of the flat engine and llama.cpp on the same file: both round activations to 8 bits
# (llama.cpp per 256 for K-quants, the flat engine per 32) and keep keys and values in 16
# bits (float16 against bfloat16), so they differ by a little, each about as far from the
# file's weights computed in float (about 1.5% of the largest logit on these files).
LOGIT_TOLERANCE = 0.03


def _flat(path: Path, cache: Path, fmt: str = "int4") -> FlatModel:
    model = packed.load_flat(path, path.stem, fmt, cache)
    assert model.native is not None, "the native forward did not build here"
    return model


def _engine(model: FlatModel) -> FlatEngine:
    return FlatEngine(SimpleNamespace(model=model))


def _ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(n)]


def test_the_files_hold_every_type_read(gguf_types: dict[str, Path]) -> None:
    """llama.cpp's quantizer put each type the flat engine reads into some file."""
    from gguf import GGUFReader

    seen = {t.tensor_type.name for p in gguf_types.values() for t in GGUFReader(p).tensors}
    assert seen == set(EXACT_TYPES)


def test_every_weight_is_what_llama_cpp_dequantizes(gguf_types: dict[str, Path]) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    for kind, path in gguf_types.items():
        for t in GGUFReader(path).tensors:
            want = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
            w = decode(t)
            got = w if isinstance(w, np.ndarray) else w.dequantize()
            assert np.array_equal(got, want.reshape(got.shape)), (kind, t.name)


def test_embedding_rows_are_what_llama_cpp_dequantizes(gguf_types: dict[str, Path]) -> None:
    """The token embedding's rows as the forwards look them up (held in 8 bits per value, or
    float32), whatever its type."""
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize

    ids = torch.tensor(_ids(64, 4))
    for kind, path in gguf_types.items():
        t = next(t for t in GGUFReader(path).tensors if t.name == "token_embd.weight")
        want = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        got = quant.Embedding.of(decode(t))(ids).numpy()
        assert np.array_equal(got, want.reshape(VOCAB, -1)[ids.numpy()]), kind


def test_the_tiles_hold_each_type_as_read(gguf_types: dict[str, Path]) -> None:
    """The narrowest tiles that hold a linear's own numbers: 4-bit for Q4_0, Q4_1 and Q4_K,
    8-bit for the others quantized, float for F16, BF16 and F32 (in their own type)."""
    import torch

    expect = {"Q4_0": quant.TILES4, "Q4_1": quant.TILES4, "Q8_0": quant.TILES8}
    expect |= {"Q6_K": quant.TILES8K, "Q4_K_M": quant.TILES4K, "F16": quant.TILESF}
    expect |= {"BF16": quant.TILESF}
    # Scales and offsets in the fewest exact bytes: float16 where the file's are, a K-quant's
    # own float per 256 and byte per group, none for Q4_0's offsets (-8 times the scale).
    modes = {"Q4_0": (quant.S16, quant.ZM8), "Q4_1": (quant.S16, quant.Z16)}
    modes |= {"Q8_0": (quant.S16, quant.Z0), "Q6_K": (quant.SK, quant.Z0)}
    modes |= {"Q4_K_M": (quant.SK, quant.ZK), "F16": (0, 0), "BF16": (0, 0)}
    for kind, tiles in expect.items():
        _, tensors = read_gguf(gguf_types[kind])
        got, _ = quant.tiles([tensors["1.gate"], tensors["1.up"]])
        assert quant.base_kind(got) == tiles, kind
        assert ((got >> 3) & 3, (got >> 5) & 7) == modes[kind], kind
        assert (got >> 8) & 3 == (2 if kind == "Q6_K" else 0), kind  # Q6_K in its own 6 bits
    _, tensors = read_gguf(gguf_types["BF16"])
    assert quant.tiles([tensors["0.down"]])[1]["tf"].dtype == torch.bfloat16


def test_logits_match_llama_cpp_on_the_same_file(
    gguf_types: dict[str, Path], tmp_path: Path
) -> None:
    import llama_cpp

    ids = _ids(48, 1)
    for kind, path in gguf_types.items():
        ours = _engine(_flat(path, tmp_path)).prefill(ids, logits=len(ids))
        assert ours is not None
        llm = llama_cpp.Llama(
            str(path), n_ctx=128, logits_all=True, verbose=False, n_threads=2, seed=0
        )
        try:
            llm.eval(ids)
            ref = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
        finally:
            llm.close()
        off = float(np.abs(ours - ref).max() / np.abs(ref).max())
        assert off <= LOGIT_TOLERANCE, (kind, off)


def _steps(engine: FlatEngine, context: list[int], path: list[int]) -> list[Any]:
    engine.reset()
    engine.prefill(context)
    out = []
    for token in path:
        start = engine.length
        out.append(engine.forward([token])[0].copy())
        engine.commit(start, [0])
    return out


def _rows_exact(model: FlatModel) -> None:
    """Each row of a verification of k = 1 .. 16 inputs, and of a random tree, equals the
    one-token step along its path."""
    engine = _engine(model)
    context, path = _ids(40, 2), _ids(17, 3)
    steps = _steps(engine, context, path)
    for k in range(1, 17):
        engine.crop(len(context))
        rows = engine.forward(path[:k])
        for i in range(k):
            assert np.array_equal(rows[i], steps[i]), (k, i)
    engine.crop(len(context))
    rng = random.Random(5)
    parents = [-1] + [rng.randrange(i) for i in range(1, 12)]
    tokens = _ids(len(parents), 6)
    layout = TreeLayout(tokens[1:], [p - 1 for p in parents[1:]])  # drafts after the root
    rows = engine.forward(tokens, layout)
    for node in range(len(tokens)):
        chain, at = [], node
        while at >= 0:
            chain.append(tokens[at])
            at = parents[at]
        assert np.array_equal(rows[node], _steps(engine, context, chain[::-1])[-1]), node


def test_rows_are_exact_at_every_row_count_for_every_type(
    gguf_types: dict[str, Path], tmp_path: Path
) -> None:
    for kind, path in gguf_types.items():
        try:
            _rows_exact(_flat(path, tmp_path))
        except AssertionError as exc:
            raise AssertionError(f"{kind}: {exc}") from exc


def test_int8_rows_are_exact(gguf_types: dict[str, Path], tmp_path: Path) -> None:
    """--dtype int8 (every linear requantized per row, on torch's int8 kernel): its rows too."""
    model = _flat(gguf_types["Q8_0"], tmp_path, "int8")
    assert model.native is not None and 1 in model.native.kinds  # torch's int8 kernel
    _rows_exact(model)


@pytest.mark.parametrize("arch", ["native", "haswell"], ids=["this-cpu", "avx2"])
def test_tiles_agree_with_the_dequantized_weights_in_float64(
    gguf_types: dict[str, Path], tmp_path: Path, arch: str
) -> None:
    """Every tiled linear of every file against its dequantized weights in float64, on the
    build for this CPU and on the AVX2 one (tiles.h's other paths), each in a process of its
    own; and a row alone equals it in a product of several, on one thread and on every core."""
    env = {**os.environ, "SAMCHAT_MODEL_CACHE": str(tmp_path), build.ARCH_ENV: arch}
    files = [str(p) for p in gguf_types.values()]
    done = subprocess.run(
        [sys.executable, "-m", "tests.engines.flat.tiles_child", *files],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr


def _with_type(source: Path, target: Path, name: str, kind: str) -> Path:
    """`source` with tensor `name` stored as `kind` (random blocks with a small scale)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFWriter

    from scripts.gguf_variants import _copy_metadata

    reader = GGUFReader(source)
    writer = GGUFWriter(str(target), "llama")
    _copy_metadata(reader, writer)
    rng = np.random.default_rng(0)
    qtype = GGMLQuantizationType[kind]
    block, size = GGML_QUANT_SIZES[qtype]
    for t in reader.tensors:
        shape = [int(n) for n in reversed(t.shape)]
        if str(t.name) != name:
            writer.add_tensor(str(t.name), np.asarray(t.data).reshape(shape))
            continue
        raw = rng.integers(0, 256, (shape[0], shape[1] // block, size), dtype=np.uint8)
        raw[..., :2] = (
            np.full(raw.shape[:2], 0.01, np.float16).view(np.uint8).reshape(*raw.shape[:2], 2)
        )
        writer.add_tensor(name, raw.reshape(shape[0], -1), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


def test_a_type_not_computed_exactly_is_refused_by_name(
    gguf_types: dict[str, Path], tmp_path: Path
) -> None:
    """IQ4_NL is not read exactly: the load names the type and the tensor, and nothing is
    requantized unless int4-requantized is asked for (then shown as such)."""
    from samchat.engines.flat.loading import LABELS

    path = _with_type(gguf_types["F32"], tmp_path / "iq.gguf", "blk.1.ffn_up.weight", "IQ4_NL")
    with pytest.raises(NotExactError) as caught:
        packed.load_flat(path, "iq", "int4", tmp_path)
    assert caught.value.tensor == "blk.1.ffn_up.weight" and caught.value.kind == "IQ4_NL"
    assert "IQ4_NL" in str(caught.value) and "\n" not in str(caught.value)
    model = packed.load_flat(path, "iq", REQUANTIZED, tmp_path)
    assert model.native is not None
    # every linear in 4 bits, as asked
    assert {quant.base_kind(k) for k in model.native.kinds[:-1]} == {quant.TILES4}
    assert REQUANTIZED in model.about
    assert LABELS[REQUANTIZED] == "int4 (requantized)"
