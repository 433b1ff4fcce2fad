"""The flat engine (packed int4/int8 weights), on the real default model straight from its
bundled Q4_1 GGUF: the GGUF's blocks decode as gguf itself dequantizes them, every row of a
verification equals one-token decoding bit for bit at every row count a draft may use (trees
too), speculative output equals plain decoding, and the packed weights are kept, mapped and
rebuilt when damaged."""

from __future__ import annotations

import functools
import os
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from samchat.decoding import ChatSession, DecodingConfig, SamplingParams, StepStats
from samchat.engines.base import Logits
from samchat.engines.costs import CostCurve
from samchat.engines.flat import packed, packfile
from samchat.engines.flat.engine import FlatEngine
from samchat.engines.flat.forward import TAIL
from samchat.engines.flat.gguf_weights import Blocks4, Blocks8, decode
from samchat.engines.flat.quant import Linear, pack4, pack8
from samchat.engines.flat.threads import TRIAL, ThreadChoice
from samchat.engines.layout import TreeLayout
from samchat.errors import ModelLoadError
from samchat.models.default import bundled_gguf
from samchat.models.loader import ModelSpec, load_model
from tests.decoding.prompts import LONG_CONTEXT, SAMPLE_MULTI, SAMPLE_SINGLE
from tests.decoding.test_session_model import _run, _static_index

pytestmark = pytest.mark.model
MAX_NEW = 24


@pytest.fixture(scope="module")
def int4_lm() -> Any:
    return load_model(ModelSpec(engine="flat"))


@pytest.fixture(scope="module")
def gguf_tensors() -> dict[str, Any]:
    from gguf import GGUFReader

    reader = GGUFReader(bundled_gguf())
    return {str(t.name): t for t in reader.tensors}


@functools.cache
def _python_lm() -> Any:
    """The bundled model packed for the Python forward (a kept file holds the layout of one
    forward: the one a load finds here, unless switched off)."""
    from samchat.engines.flat.native import SWITCH

    with pytest.MonkeyPatch.context() as m:
        m.setenv(SWITCH, "0")
        return load_model(ModelSpec(engine="flat"))


def _engine(lm: Any, native: bool, threads: int | None = None) -> FlatEngine:
    """An engine on the native forward (lm as loaded here) or on the Python one, on `threads`
    threads (None: chosen while it runs)."""
    return FlatEngine(lm if native else _python_lm(), threads=threads)


def _reference(tensor: Any) -> np.ndarray[Any, Any]:
    from gguf.quants import dequantize

    return np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)


def test_gguf_blocks_decode_as_gguf_dequantizes(gguf_tensors: dict[str, Any]) -> None:
    """Q4_1 linears, the Q8_0 embedding and F32 norms of the bundled file; Q4_0 and F16 from
    gguf's own quantizer."""
    from gguf import GGMLQuantizationType as T
    from gguf.quants import quantize

    q41 = decode(gguf_tensors["blk.3.ffn_gate.weight"])
    assert isinstance(q41, Blocks4)
    ref = _reference(gguf_tensors["blk.3.ffn_gate.weight"])
    np.testing.assert_allclose(q41.dequantize(), ref, rtol=1e-6, atol=1e-7)
    q80 = decode(gguf_tensors["token_embd.weight"])
    assert isinstance(q80, Blocks8)
    assert np.array_equal(q80.dequantize(), _reference(gguf_tensors["token_embd.weight"]))
    norm = decode(gguf_tensors["blk.0.attn_norm.weight"])
    assert np.array_equal(norm, _reference(gguf_tensors["blk.0.attn_norm.weight"]))
    rng = np.random.default_rng(0)
    values = rng.standard_normal((64, 128)).astype(np.float32)
    for kind in (T.Q4_0, T.F16):
        raw = quantize(values, kind)
        fake = SimpleNamespace(tensor_type=kind, shape=[128, 64], data=raw)
        got = decode(fake)
        got = got if isinstance(got, np.ndarray) else got.dequantize()
        np.testing.assert_allclose(got, _reference(fake).reshape(64, 128), rtol=1e-6, atol=1e-7)


def test_packed_linears_compute_the_dequantized_weights(gguf_tensors: dict[str, Any]) -> None:
    """The int4 kernel on a GGUF's own Q4_1 numbers (scales rounded to bfloat16), and int8 on
    the requantized Q8_0 rows, against float matmuls of the weights they hold."""
    w = decode(gguf_tensors["blk.5.ffn_up.weight"])
    assert isinstance(w, Blocks4)
    x = torch.randn(3, w.q.shape[1]).to(torch.bfloat16)
    lin = Linear("int4", *pack4([w]))
    scale = torch.from_numpy(w.scale).to(torch.bfloat16).float().numpy()
    zero = torch.from_numpy(w.offset + 8.0 * w.scale).to(torch.bfloat16).float().numpy()
    held = Blocks4(w.q, scale, zero - 8.0 * scale).dequantize()
    want = x.float() @ torch.from_numpy(held).t()
    _close(lin(x).float(), want)
    e = decode(gguf_tensors["token_embd.weight"])
    rows = e.dequantize()[:512] if isinstance(e, Blocks8) else None
    assert rows is not None
    q8, s8 = pack8([rows])
    # Per-row requantization of Q8_0 rows stays within half a step of each value.
    step = s8.float()[:, None]
    assert float(((q8.float() * step - torch.from_numpy(rows)).abs() / step).max()) <= 0.5 + 1e-3
    want8 = x[:, :576].float() @ (q8.float() * step).t()
    _close(Linear("int8", q8, s8)(x[:, :576]).float(), want8)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Equal up to the bfloat16 rounding of the kernels' output."""
    assert float((got - want).abs().max()) <= 0.01 * float(want.abs().max())


def _prompt(lm: Any, text: str) -> list[int]:
    session = ChatSession(lm, DecodingConfig(method="plain"))
    return list(session.render([{"role": "user", "content": text}]))


def _plain_rows(
    lm: Any, context: list[int], path: list[int], native: bool, threads: int | None = None
) -> list[Logits]:
    """Logits of one-token steps along path after context, each step committed."""
    engine = _engine(lm, native, threads)
    engine.prefill(context)
    out = []
    for t in path:
        start = engine.length
        out.append(engine.forward([t])[0].copy())
        engine.commit(start, [0])
    return out


FORWARDS = pytest.mark.parametrize("native", [True, False], ids=["native", "python"])


def test_the_native_forward_runs_where_a_compiler_is(int4_lm: Any) -> None:
    """This machine has a C++ compiler (CI builds with it): the compiled forward is in use."""
    assert int4_lm.model.native is not None
    assert "native llama forward" in FlatEngine(int4_lm).meter.describe()
    assert "Python llama forward" in FlatEngine(_python_lm()).meter.describe()


@FORWARDS
def test_rows_equal_one_token_steps_at_every_row_count(int4_lm: Any, native: bool) -> None:
    """A sequence of k inputs, k = 1 .. the most a draft has, from starts that cross the
    64-position boundary where attention splits: each row equals its one-token step."""
    prompt = _prompt(int4_lm, "Describe the river Lune briefly.")
    context = prompt[:-1]
    rng = random.Random(3)
    path = [prompt[-1]] + [rng.randrange(49152) for _ in range(TAIL + 16)]
    ref = _plain_rows(int4_lm, context, path, native)
    engine = _engine(int4_lm, native)
    engine.prefill(context)
    base = engine.length
    for k in range(1, TAIL + 1):
        s = k % 17
        engine.prefill(path[:s])
        got = engine.forward(path[s : s + k])
        for i in range(k):
            assert np.array_equal(got[i], ref[s + i]), (k, s, i)
        engine.crop(base)


@pytest.mark.all_cores
def test_rows_split_between_threads_equal_one_token_steps_on_one(int4_lm: Any) -> None:
    """On every core (the rest of the suite gives each worker one): the native forward's
    verifications, sequences of 1 to 64 rows (either side of the norms' 16-row grain and of
    the tiles) and a tree, their rows, heads and output blocks split between threads, equal
    one-token steps computed on a single thread. So a row depends neither on which thread
    runs it nor on how many there are."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(2, cores or 1)  # two at least, so that the work really is split
    prompt = _prompt(int4_lm, "Describe the river Lune briefly.")
    context = prompt[:-1]
    rng = random.Random(13)
    path = [prompt[-1]] + [rng.randrange(49152) for _ in range(TAIL + 16)]
    likely = path[: TAIL + 1]
    tokens, parents = _random_tree(rng, likely, TAIL - 1)
    layout = TreeLayout(tokens, parents)
    before = torch.get_num_threads()
    try:
        ref = _plain_rows(int4_lm, context, path, native=True, threads=1)
        tree_ref = _tree_rows(int4_lm, context, [path[0], *tokens], layout, True, threads=1)
        engine = FlatEngine(int4_lm, threads=threads)
        engine.prefill(context)
        base = engine.length
        for k in (1, 2, 3, 5, 8, 15, 16, 17, 24, 31, 32, 33, 47, TAIL - 1, TAIL):
            s = k % 17  # starts on either side of the 64-position boundary where attention splits
            engine.prefill(path[:s])
            got = engine.forward(path[s : s + k])
            for i in range(k):
                assert np.array_equal(got[i], ref[s + i]), (threads, k, s, i)
            engine.crop(base)
        rows = engine.forward([path[0], *tokens], layout)
        for node in range(layout.n):
            assert np.array_equal(rows[node], tree_ref[node]), (threads, "tree", node)
    finally:
        torch.set_num_threads(before)


def _random_tree(rng: random.Random, likely: list[int], size: int) -> tuple[list[int], list[int]]:
    tokens: list[int] = []
    parents: list[int] = []
    depth: list[int] = []
    for i in range(size):
        parent = rng.randrange(-1, i)
        d = 0 if parent < 0 else depth[parent] + 1
        depth.append(d)
        near = d + 1 < len(likely) and rng.random() < 0.6
        tokens.append(likely[d + 1] if near else rng.randrange(49152))
        parents.append(parent)
    return tokens, parents


@FORWARDS
def test_tree_verification_is_exact_on_random_trees(int4_lm: Any, native: bool) -> None:
    """Step after step of random trees (up to the most rows a draft has) after contexts on
    either side of a 64-position boundary: each node's row equals one-token decoding along its
    path, and committing a path leaves the cache as plain decoding would."""
    rng = random.Random(7)
    for question in ("Describe the river Lune briefly.", "\n\n".join(LONG_CONTEXT[:1]) + "?"):
        prompt = _prompt(int4_lm, question)
        engine = _engine(int4_lm, native)
        engine.prefill(prompt[:-1])
        context = prompt[:-1]
        pending = prompt[-1]
        likely = [pending, *_plain_rows_tokens(int4_lm, context, pending, 24, native)]
        for size in (1, 5, 20, TAIL - 1, 12):
            tokens, parents = _random_tree(rng, likely, size)
            layout = TreeLayout(tokens, parents)
            start = engine.length
            inputs = [pending, *tokens]
            rows = engine.forward(inputs, layout)
            ref = _tree_rows(int4_lm, context, inputs, layout, native)
            for node in range(layout.n):
                assert np.array_equal(rows[node], ref[node]), (size, node)
            node = rng.randrange(layout.n)
            keep = []
            while node >= 0:
                keep.append(node)
                node = layout.parents[node]
            keep.reverse()
            engine.commit(start, keep)
            context = context + [inputs[j] for j in keep]
            pending = int(np.argmax(rows[keep[-1]]))
            likely = [pending, *_plain_rows_tokens(int4_lm, context, pending, 24, native)]
            assert engine.length == len(context)


def _tree_rows(
    lm: Any,
    context: list[int],
    inputs: list[int],
    layout: TreeLayout,
    native: bool,
    threads: int | None = None,
) -> list[Logits]:
    """Each tree node's row by one-token decoding along its path (depth first, one step per
    node: the reference engine holds the context and the node's ancestors)."""
    engine = _engine(lm, native, threads)
    engine.prefill(context)
    kids: list[list[int]] = [[] for _ in range(layout.n)]
    for node in range(1, layout.n):
        kids[layout.parents[node]].append(node)
    rows: list[Logits] = [np.empty(0, dtype=np.float32)] * layout.n

    def visit(node: int) -> None:
        start = engine.length
        rows[node] = engine.forward([inputs[node]])[0].copy()
        engine.commit(start, [0])
        for kid in kids[node]:
            visit(kid)
        engine.crop(start)

    visit(0)
    return rows


def _plain_rows_tokens(
    lm: Any, context: list[int], pending: int, n: int, native: bool
) -> list[int]:
    """Greedy continuation after context + pending (tokens a draft would likely hold)."""
    engine = _engine(lm, native)
    engine.prefill(context)
    out: list[int] = []
    tok = pending
    for _ in range(n):
        start = engine.length
        tok = int(np.argmax(engine.forward([tok])[0]))
        engine.commit(start, [0])
        out.append(tok)
    return out


@pytest.mark.parametrize(
    "curve", [CostCurve.default("cpu"), CostCurve.flat()], ids=["cpu-curve", "flat-curve"]
)
def test_greedy_speculative_equals_plain_on_real_prompts(
    int4_lm: Any, tmp_path: Path, curve: CostCurve
) -> None:
    params = SamplingParams(max_new_tokens=MAX_NEW)
    index = _static_index(tmp_path, int4_lm)
    spec = ChatSession(int4_lm, DecodingConfig(method="sam+tr"), index, curve)
    plain = ChatSession(int4_lm, DecodingConfig(method="plain"))
    drafted = 0
    for prompt in SAMPLE_SINGLE:
        messages = [{"role": "user", "content": prompt}]
        want, _, _ = _run(plain, messages, params)
        got, _, events = _run(spec, messages, params)
        assert got == want, prompt
        drafted += sum(e.accepted for e in events if isinstance(e, StepStats))
    for turns in SAMPLE_MULTI:
        history = [{"role": "system", "content": "You are a concise assistant."}]
        for turn in turns:
            history.append({"role": "user", "content": turn})
            want, _, _ = _run(plain, history, params)
            got, done, _ = _run(spec, history, params)
            assert got == want, turn
            history.append({"role": "assistant", "content": done.text})
    assert drafted > 0
    sampled = SamplingParams(max_new_tokens=MAX_NEW, temperature=0.7, top_p=0.9, seed=11)
    messages = [{"role": "user", "content": SAMPLE_SINGLE[0]}]
    assert _run(spec, messages, sampled)[0] == _run(plain, messages, sampled)[0]


def test_second_start_maps_the_kept_weights(tmp_path: Path, monkeypatch: Any) -> None:
    """Packed once into the cache, mapped by the next start (nothing packed again); a corrupt
    or foreign kept file is packed again with a one-line notice."""
    gguf = bundled_gguf()
    said: list[str] = []
    first = packed.load_flat(gguf, "smol", "int4", tmp_path, said.append)
    assert any("packing" in s for s in said)
    kept = list((tmp_path / "packed").glob("*"))
    assert len(kept) == 1 and kept[0].name.endswith(".flat") and "-native-" in kept[0].name

    def refuse(*_: Any) -> Any:
        raise AssertionError("packed again")

    with monkeypatch.context() as m:
        m.setattr(packed, "convert", refuse)
        said.clear()
        second = packed.load_flat(gguf, "smol", "int4", tmp_path, said.append)
    assert said == [] and second.about.startswith("mapped")
    for name, t in first.tensors.items():
        assert torch.equal(t, second.tensors[name]), name
    cut = kept[0].with_name("cut")
    cut.write_bytes(kept[0].read_bytes()[:1000])
    cut.replace(kept[0])  # cut short (a new file: the models above map the old one)
    said.clear()
    third = packed.load_flat(gguf, "smol", "int4", tmp_path, said.append)
    assert len([s for s in said if "unusable" in s]) == 1
    assert "\n" not in said[0] and third.about.startswith("packed")
    # Another instruction set's packing under this file's name: foreign, packed again.
    meta = {**packed._key(packed.file_identity(gguf), "int4", "native"), "capability": "AVX2"}
    packfile.write_all(kept[0], third.tensors.items(), {**meta, "shape": third.shape.to_json()})
    said.clear()
    packed.load_flat(gguf, "smol", "int4", tmp_path, said.append)
    assert any("capability" in s for s in said)


def test_requantizing_is_asked_for_and_named(tmp_path: Path) -> None:
    """--dtype int4 holds the file's own numbers (the bundled Q4_1 and Q8_0); int4-requantized
    quantizes every linear to 4 bits and is named so wherever the dtype is shown."""
    from samchat.engines.flat.native.forward import TORCH_INT8
    from samchat.engines.flat.quant import TILES4, TILES8, base_kind

    own = load_model(ModelSpec(engine="flat", dtype="int4"))
    assert own.dtype == "int4" and "Q4_1, Q8_0 as in the file" in own.model.about
    asked = load_model(ModelSpec(engine="flat", dtype="int4-requantized"))
    assert asked.dtype == "int4 (requantized)"
    assert asked.model.native is not None and own.model.native is not None
    assert {base_kind(k) for k in asked.model.native.kinds[:-1]} == {
        TILES4
    } and TORCH_INT8 not in own.model.native.kinds
    assert base_kind(own.model.native.kinds[-1]) == TILES8  # the tied Q8_0 output, as it is


def test_the_spelling_users_know_names_the_flat_engine(int4_lm: Any) -> None:
    """`--engine torch --dtype int4` (and `--dtype int4` alone) load the flat engine, as
    `--engine flat` does: one engine, one name in the status bar and the records."""
    from samchat.engines.registry import FLAT

    for spec in (ModelSpec(engine="torch", dtype="int4"), ModelSpec(dtype="int4")):
        lm = load_model(spec)
        assert (lm.engine, lm.dtype, lm.kind) == ("flat", "int4", FLAT)
        assert isinstance(lm.kind.open(lm), FlatEngine)
    assert (int4_lm.engine, int4_lm.dtype) == ("flat", "int4")


def test_bad_requests_are_one_line_errors() -> None:
    with pytest.raises(ModelLoadError, match="runs on the CPU"):
        load_model(ModelSpec(dtype="int4", device="cuda"))
    with pytest.raises(ModelLoadError, match="runs on the CPU"):
        load_model(ModelSpec(engine="flat", device="cuda"))
    with pytest.raises(ModelLoadError, match="quantized format"):
        load_model(ModelSpec(dtype="int8", quantize="4bit", device="cpu"))
    with pytest.raises(ModelLoadError, match="the flat engine runs --dtype int4, int8 or"):
        load_model(ModelSpec(engine="flat", dtype="float32"))
    with pytest.raises(ModelLoadError, match="--quantize and --cuda-graphs apply to"):
        load_model(ModelSpec(engine="flat", quantize="4bit"))


def test_float_weights_requantize_to_the_gguf_grid(gguf_tensors: dict[str, Any]) -> None:
    """Group-32 quantization of float weights (what a Hugging Face checkpoint or an F16 GGUF
    gets) finds the Q4_1 grid again from the weights' dequantized values."""
    from samchat.engines.flat.quant import to_blocks4

    w = decode(gguf_tensors["blk.7.attn_q.weight"])
    assert isinstance(w, Blocks4)
    values = w.dequantize()
    again = to_blocks4(values).dequantize()
    step = np.repeat(w.scale, 32, axis=1)
    assert float(np.max(np.abs(again - values) / np.maximum(step, 1e-12))) < 0.51
    # Off the grid, values would be a quarter of a step away on average.
    assert float(np.mean(np.abs(again - values) / np.maximum(step, 1e-12))) < 0.03


@pytest.mark.parametrize("fmt", ["int4", "int8"])
def test_a_hugging_face_directory_loads_in_the_cpu_formats(fmt: str) -> None:
    from samchat.engines.torch.conversion import convert_gguf
    from samchat.models.default import converted_dir

    converted = convert_gguf(bundled_gguf(), converted_dir(), lambda _: None)
    lm = load_model(ModelSpec(source=str(converted), dtype=fmt))
    assert lm.dtype == fmt and lm.engine == "flat"
    session = ChatSession(lm, DecodingConfig(method="plain"))
    messages = [
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."}
    ]
    _, done, _ = _run(session, messages, SamplingParams(max_new_tokens=16))
    assert "Paris" in done.text


def test_switching_threads_while_decoding_never_changes_a_token(int4_lm: Any) -> None:
    """The real engine, trying the other count every few forwards (and keeping whichever ran
    faster): its greedy tokens equal those of an engine on two threads throughout."""
    before = torch.get_num_threads()
    prompt = _prompt(int4_lm, "Name three rivers of England.")

    def greedy(engine: FlatEngine) -> list[int]:
        engine.prefill(prompt[:-1])
        out, tok = [], prompt[-1]
        for _ in range(40):
            start = engine.length
            tok = int(np.argmax(engine.forward([tok])[0]))
            engine.commit(start, [0])
            out.append(tok)
        return out

    try:
        fixed = greedy(FlatEngine(int4_lm, threads=2))
        engine = FlatEngine(int4_lm)
        engine.threads = ThreadChoice(2, first_wait=2)
        assert greedy(engine) == fixed
        assert engine.threads.ran.get(1, 0) >= TRIAL and engine.threads.ran.get(2, 0) >= TRIAL
        # Each count is set for a forward only: the thread's own count is left as it was.
        assert torch.get_num_threads() == before
    finally:
        torch.set_num_threads(before)
