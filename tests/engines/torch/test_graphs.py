"""Fixed-shape steps (graphs.py), the path `--cuda-graphs` replays: run eagerly on the CPU with
the real default model, they give plain decoding's tokens, drafted or not, across padded rows,
growing key windows, tree paths compacted in the fixed buffer and a multi-turn chat."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from samchat.decoding import (
    ChatSession,
    DecodingConfig,
    SamplingParams,
    StepStats,
    TextDelta,
)
from samchat.decoding.tree import DraftTree
from samchat.engines.costs import CostCurve, measurement
from samchat.engines.costs.cache import load_or_measure
from samchat.engines.kernels import KernelPlan
from samchat.engines.torch import measure
from samchat.engines.torch.engine import TorchEngine
from samchat.engines.torch.forward import ModelForward
from samchat.engines.torch.graphs import StaticSteps, bucket
from samchat.engines.torch.kvcache import KVCache
from tests.decoding.prompts import LONG_CONTEXT, MULTI_TURN, SINGLE_TURN
from tests.decoding.test_session_model import CPU_CURVE, MAX_NEW, _reference


def test_bucket_is_the_power_of_two_at_or_above() -> None:
    assert [bucket(n) for n in (1, 2, 3, 4, 5, 63, 64)] == [1, 2, 4, 4, 8, 64, 64]
    assert bucket(1, 256) == 256 and bucket(257, 256) == 512


@pytest.fixture(scope="module")
def static_lm(default_lm: Any) -> Any:
    return dataclasses.replace(default_lm, steps="static")


def _engines(default_lm: Any, static_lm: Any) -> tuple[TorchEngine, TorchEngine]:
    return TorchEngine(default_lm), TorchEngine(static_lm)


def test_auto_steps_run_eagerly_off_cuda(default_lm: Any) -> None:
    """The default on CUDA ("auto") picks graphs only where they can be captured: a model on
    the CPU keeps ordinary steps."""
    engine = TorchEngine(default_lm, steps="auto")
    assert engine.steps == "dynamic" and engine._static is None
    assert TorchEngine(default_lm, steps="static")._static is not None


@pytest.mark.model
@torch.inference_mode()  # as the session commits
def test_a_static_step_computes_what_an_ordinary_step_does(default_lm: Any, static_lm: Any) -> None:
    """Sequences and trees of several sizes (padded to 1, 4, 8, 16 rows), keys windowed to 256
    and 512 rows: the logits agree with the ordinary step's to float rounding and pick the
    same tokens, and after committing a tree path both caches give the same next step."""
    dyn, static = _engines(default_lm, static_lm)
    assert static._static is not None and dyn._static is None
    gen = torch.Generator().manual_seed(1)
    vocab = int(default_lm.vocab_size)
    for context in (40, 300):
        prompt = torch.randint(0, vocab, (context,), generator=gen).tolist()
        for engine in (dyn, static):
            engine.reset()
            engine.prefill(prompt)
        for nodes in (0, 2, 6, 15):  # 1, 3, 7 and 16 inputs
            ids = torch.randint(0, vocab, (nodes + 1,), generator=gen).tolist()
            # A tree: each node hangs below the root or one of the previous nodes.
            parents = [int(torch.randint(-1, i, (1,), generator=gen)) for i in range(nodes)]
            layout = DraftTree(ids[1:], parents, "tr").layout() if nodes else None
            start = dyn.length
            a = dyn.forward(ids, layout)
            b = static.forward(ids, layout)
            assert a.shape == b.shape == (nodes + 1, vocab)
            assert np.array_equal(a.argmax(-1), b.argmax(-1))
            assert float(np.abs(a - b).max()) < 1e-3
            assert static.length == dyn.length == start + nodes + 1
            keep = [0, *_path(parents)]
            for engine in (dyn, static):
                engine.commit(start, keep)
            after = [ids[-1]]
            assert np.array_equal(dyn.forward(after).argmax(-1), static.forward(after).argmax(-1))
    assert static._static.shapes >= 4  # several row counts and both windows ran


def _path(parents: list[int]) -> list[int]:
    """Input indices (the root is 0) of the last node and its ancestors, root excluded."""
    node = len(parents) - 1
    path: list[int] = []
    while node >= 0:
        path.append(node + 1)
        node = parents[node]
    return path[::-1]


@pytest.mark.model
@pytest.mark.parametrize(
    ("curve", "methods"),
    [(CPU_CURVE, ("plain", "sam+tr")), (CostCurve.flat(), ("sam+tr",))],
    ids=["cpu-curve", "flat-curve"],
)
def test_greedy_speculative_on_static_steps_equals_generate(
    static_lm: Any, default_lm: Any, tmp_path: Path, curve: CostCurve, methods: tuple[str, ...]
) -> None:
    """Plain and sam+tr on fixed-shape steps give transformers' own greedy tokens: single
    questions, a long passage (keys past one window) and a multi-turn chat (cache reused).
    Plain decoding prices nothing, so it runs under one curve. The kernels are those the run
    measured for ordinary steps (the fixed steps' own costs are not timed: the curve is
    given). Up to a minute on 2 cores where it computes the shared reference replies first."""
    params = SamplingParams(max_new_tokens=MAX_NEW)
    drafted = 0
    ordinary = TorchEngine(default_lm).meter.cost_curve().kernels
    assert ordinary is not None
    for method in methods:
        config = DecodingConfig(method=method)
        session = ChatSession(static_lm, config, cost_curve=curve, measure_first=False)
        engine = session.engine
        assert isinstance(engine, TorchEngine)
        engine.meter.fit(measure=False)
        assert engine._fwd.plan == ordinary
        for prompt in (SINGLE_TURN[0], SINGLE_TURN[5], LONG_CONTEXT[0]):
            messages = [{"role": "user", "content": prompt}]
            ids, steps = _reply(session, messages, params)
            assert ids == _reference(default_lm, messages), (method, prompt)
            drafted += sum(s.accepted for s in steps)
        messages = [{"role": "system", "content": "You are a concise assistant."}]
        for turn in MULTI_TURN[0]:
            messages.append({"role": "user", "content": turn})
            ids, _ = _reply(session, messages, params)
            assert ids == _reference(default_lm, messages), (method, turn)
            messages.append({"role": "assistant", "content": default_lm.tokenizer.decode(ids)})
    assert drafted > 0


def _reply(
    session: ChatSession, messages: list[dict[str, str]], params: SamplingParams
) -> tuple[list[int], list[StepStats]]:
    events = list(session.generate(messages, params))
    ids = [t for e in events if isinstance(e, TextDelta) for t in e.token_ids]
    return ids, [e for e in events if isinstance(e, StepStats)]


@pytest.mark.model
def test_fixed_steps_refuse_what_they_cannot_hold(default_lm: Any, static_lm: Any) -> None:
    """A step past the fixed buffer takes the ordinary path while it fits, and nothing ever
    moves the buffer (a captured graph holds its address): one clear error instead."""
    engine = TorchEngine(static_lm)
    assert engine._static is not None
    assert engine._static.capacity == int(default_lm.context_limit)  # the whole context
    # A small buffer, quick to fill.
    engine._kv = KVCache(default_lm.model)
    steps = engine._static = StaticSteps(engine._fwd, engine._kv, 64, capture=False)
    cap = steps.capacity
    assert cap == 64
    buf = engine._kv.slab.buf if engine._kv.slab is not None else None
    engine.prefill([1] * (cap - 3))
    assert not steps.fits(4) and steps.fits(2)
    engine.forward([2, 3, 4])  # ordinary path, inside the buffer
    assert engine.length == cap
    with pytest.raises(RuntimeError, match="do not fit"):
        engine.forward([5])
    assert engine._kv.slab is not None and engine._kv.slab.buf is buf
    with pytest.raises(ValueError, match="CUDA"):
        TorchEngine(dataclasses.replace(default_lm, steps="graphs"))


@pytest.mark.model
def test_static_steps_need_a_slab(default_lm: Any) -> None:
    kv = KVCache(default_lm.model, preallocate=False)
    with pytest.raises(ValueError, match="slab"):
        StaticSteps(ModelForward(default_lm.model), kv, 64, capture=False)


@pytest.mark.model
def test_fixed_steps_take_the_kernels_measured_for_ordinary_steps(
    default_lm: Any, static_lm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Fixed-shape steps time their own step costs, but run the kernels already measured for
    ordinary steps of the same model: one kernel measurement per model, not two."""
    from samchat.engines.torch import engine as torch_engine

    monkeypatch.setattr(default_lm.curves, "curves", {})
    plan = KernelPlan.of({1: "stock", 2: "wht", 9: "stock"})
    ordinary = TorchEngine(default_lm, tmp_path)
    # As an earlier run leaves it: the ordinary steps' curve and plan in the cache.
    load_or_measure(lambda: CostCurve({1: 1.0, 2: 1.5}, kernels=plan), ordinary.meter._curve_file())

    def fail(*_: Any, **__: Any) -> CostCurve:
        raise AssertionError("the kernels were measured again")

    monkeypatch.setattr(torch_engine, "measure_cost_curve", fail)
    quick = functools.partial(measurement.measure_engine, context=32, reps=1)
    monkeypatch.setattr(torch_engine, "measure_engine", quick)
    fixed = TorchEngine(static_lm, tmp_path)
    curve = fixed.meter.cost_curve()
    assert curve.kernels == plan and fixed._fwd.plan == plan
    saved = fixed.meter._curve_file()
    assert (
        saved is not None and saved != ordinary.meter._curve_file()
    )  # its own costs, cached apart
    assert json.loads(saved.read_text())["kernels"] == plan.to_dict()

    # Fixed steps first on a new machine: the kernels they measure are kept for ordinary steps.
    monkeypatch.setattr(default_lm.curves, "curves", {})
    monkeypatch.setattr(static_lm.curves, "curves", {})
    timed = functools.partial(measure.measure_cost_curve, context=32, reps=1)
    monkeypatch.setattr(torch_engine, "measure_cost_curve", timed)
    first = TorchEngine(static_lm, tmp_path / "new").meter.cost_curve()
    monkeypatch.setattr(torch_engine, "measure_cost_curve", fail)
    later = TorchEngine(default_lm, tmp_path / "new")
    assert first.kernels is not None and later.meter.cost_curve().kernels == first.kernels
    kept = later.meter._curve_file()
    assert kept is not None and json.loads(kept.read_text())["kernels"] == first.kernels.to_dict()
