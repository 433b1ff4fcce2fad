"""Kernels chosen by measurement: the choice logic on given timings, the plan's mapping of input
sizes, its cache round trip, and the torch engine taking the measured plan for every step; the
measured cost curve, cached, and measured again where the cache is stale or implausible."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from samchat.engines.costs import SIZES, CostCurve
from samchat.engines.costs.cache import CURVE_VERSION, cached_kernel_plans, load_or_measure
from samchat.engines.kernels import (
    DEFAULT_PLAN,
    KERNELS,
    KernelPlan,
    measure_kernels,
    plan_from,
)
from samchat.engines.torch import measure
from samchat.engines.torch.measure import measure_cost_curve
from tests.tiny import make_tiny_llama

# Made-up forward times (ms) by size and kernel: wht wins 1 row, wht+gqa 2-4 rows, stock 8.
TIMES = {
    1: {"stock": 10.0, "wht": 8.0},
    2: {"stock": 12.0, "wht": 9.0, "wht+gqa": 8.5},
    4: {"stock": 14.0, "wht": 12.0, "wht+gqa": 10.0},
    8: {"stock": 15.0, "wht": 15.1, "wht+gqa": 30.0},
}


def _candidates(n: int) -> tuple[str, ...]:
    return tuple(TIMES[n])


def test_the_fastest_kernel_of_each_size_is_chosen() -> None:
    calls: list[tuple[int, str]] = []

    def run(n: int, kernel: str) -> float:
        calls.append((n, kernel))
        return TIMES[n][kernel] / 1000

    plan, times = measure_kernels(run, (1, 2, 4, 8), _candidates, reps=4)
    assert plan.to_dict() == {"1": "wht", "2": "wht+gqa", "4": "wht+gqa", "8": "stock"}
    assert times == {1: 0.008, 2: 0.0085, 4: 0.010, 8: 0.015}
    # A candidate far slower than the best stops being timed after the first timed round; the
    # model's own kernels are always timed (they are the fallback).
    assert calls.count((8, "wht+gqa")) == 2
    assert calls.count((8, "stock")) == 5


def test_a_near_tie_goes_to_the_models_own_kernels() -> None:
    plan, _ = measure_kernels(
        lambda n, k: {"stock": 1.0, "wht": 0.99}[k], (1,), lambda n: ("stock", "wht")
    )
    assert plan.kernel(1) == "stock"


def test_medians_not_minimums_decide() -> None:
    """One lucky fast run of a kernel does not make it the choice."""
    seq = {"stock": iter([5.0, 5.0, 5.0, 5.0, 5.0]), "wht": iter([6.0, 1.0, 6.0, 6.0, 6.0])}
    plan, _ = measure_kernels(lambda n, k: next(seq[k]), (1,), lambda n: ("stock", "wht"))
    assert plan.kernel(1) == "stock"


def test_a_plan_maps_every_input_size() -> None:
    plan = KernelPlan.of({1: "wht", 4: "wht+gqa", 16: "stock"})
    assert [plan.kernel(n) for n in (1, 2, 4, 5, 16, 64)] == [
        "wht",
        "wht+gqa",
        "wht+gqa",
        "stock",
        "stock",
        "stock",
    ]
    assert plan.flags(1) == (True, False)
    assert plan.flags(3) == (True, True)
    assert plan.flags(9) == (False, False)
    assert plan.describe() == (
        "1 row: W @ hᵀ; 2-4 rows: W @ hᵀ + packed GQA; 5+ rows: the model's own"
    )
    assert DEFAULT_PLAN.describe() == "1 row: the model's own; 2+ rows: W @ hᵀ + packed GQA"
    assert plan_from(plan.to_dict()) == plan
    for bad in ({"1": "turbo"}, {}, "stock", None, {"x": "stock"}):
        assert plan_from(bad) is None
    with pytest.raises(ValueError):
        KernelPlan.of({1: "turbo"})


def test_the_cost_curve_carries_its_plan_through_the_cache(
    tmp_path: Path, one_thread: None
) -> None:
    """A tiny model's timings are noise: only the shape of the result is certain."""
    model = make_tiny_llama()
    measured = measure_cost_curve(model, torch.device("cpu"), context=32, reps=1)
    assert measured.kernels is not None
    assert measured.xs == list(SIZES) and measured.rel(1) == 1.0
    assert {k for _, k in measured.kernels.choice} <= set(KERNELS)
    path = tmp_path / "costs" / "x.json"
    about = {"model": "tiny", "cpu": "test cpu"}
    first = load_or_measure(lambda: measured, path, about=about)
    data = json.loads(path.read_text())
    assert data["version"] == CURVE_VERSION and data["about"] == about
    assert data["kernels"] == measured.kernels.to_dict()

    def fail() -> CostCurve:
        raise AssertionError("a cached curve is not measured again")

    again = load_or_measure(fail, path)
    assert again.kernels == first.kernels
    assert cached_kernel_plans(path.parent) == [(about, measured.kernels)]
    (path.parent / "junk.json").write_text("{not json")
    assert len(cached_kernel_plans(path.parent)) == 1


@pytest.mark.model
def test_the_engine_runs_the_measured_plan(
    default_lm: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Plain steps and verification take the plan measured on this machine (from the cache on
    a later start), and every candidate kernel gives the stock logits up to rounding."""
    from samchat.engines.torch import engine as torch_engine
    from samchat.engines.torch.engine import TorchEngine

    monkeypatch.setattr(default_lm.curves, "curves", {})  # measure here, whatever ran before
    # A short context and one timed round: this checks where the plan goes, whichever kernels
    # win, not the precision of the timing.
    quick = functools.partial(measure.measure_cost_curve, context=64, reps=1)
    monkeypatch.setattr(torch_engine, "measure_cost_curve", quick)
    engine = TorchEngine(default_lm, tmp_path)
    assert engine._fwd.plan == DEFAULT_PLAN
    engine.meter.fit()
    curve = engine.meter.cost_curve()
    assert curve.kernels is not None and engine._fwd.plan == curve.kernels
    assert engine.meter.kernels() == curve.kernels.describe()
    assert curve.kernels.describe() in engine.meter.describe()
    [(about, cached)] = cached_kernel_plans(tmp_path / "costs")
    assert cached == curve.kernels and about["dtype"] == "float32" and about["cpu"]

    # A fresh process: the plan comes from the cache file, not a new measurement.
    monkeypatch.setattr(default_lm.curves, "curves", {})

    def fail(*_: Any, **__: Any) -> CostCurve:
        raise AssertionError("measured again")

    monkeypatch.setattr(torch_engine, "measure_cost_curve", fail)
    monkeypatch.setattr(measure, "measure_cost_curve", fail)
    later = TorchEngine(default_lm, tmp_path)
    later.meter.fit()
    assert later._fwd.plan == curve.kernels
    # A curve this process knows goes into a cache that lacks it (a second home, say), unmeasured.
    TorchEngine(default_lm, tmp_path / "other").meter.cost_curve()
    assert cached_kernel_plans(tmp_path / "other" / "costs") == [(about, curve.kernels)]

    tok = default_lm.tokenizer
    prompt = tok("Name three colours of the rainbow: red, orange,")["input_ids"]
    ids = tok(" yellow, green and blue")["input_ids"]
    rows: dict[str, Any] = {}
    for kernel in KERNELS:
        later.reset()
        later.prefill(prompt)
        later._fwd.plan = KernelPlan.only(kernel)
        rows[kernel] = later.forward(ids)
    for kernel in ("wht", "wht+gqa"):
        assert np.allclose(rows[kernel], rows["stock"], atol=2e-3, rtol=0)
        assert np.array_equal(rows[kernel].argmax(-1), rows["stock"].argmax(-1))


@pytest.mark.private_costs
def test_doctor_lists_the_measured_plans(tmp_path: Path) -> None:
    from samchat import paths
    from samchat.commands.doctor import report

    rows = dict(report())
    assert rows["torch kernels"].startswith("not measured yet")
    plan = KernelPlan.of({1: "wht", 8: "stock"})
    curve = CostCurve({1: 1.0, 8: 2.0}, kernels=plan)
    about = {"model": "SmolLM2-135M-Instruct", "dtype": "float32"}
    load_or_measure(lambda: curve, paths.cache_dir() / "costs" / "a.json", about=about)
    rows = dict(report())
    assert "torch kernels" not in rows
    assert rows["torch kernels (SmolLM2-135M-Instruct, float32)"] == (
        "1 row: W @ hᵀ; 2+ rows: the model's own"
    )


def test_without_a_cache_file_a_curve_is_measured_and_not_written(tmp_path: Path) -> None:
    calls: list[int] = []

    def measure() -> CostCurve:
        calls.append(1)
        return CostCurve({1: 1.0, 4: 1.5})

    assert load_or_measure(measure, None).rel(4) == 1.5
    assert load_or_measure(measure, None).rel(4) == 1.5
    assert len(calls) == 2 and list(tmp_path.iterdir()) == []


def test_measured_curve_is_cached(tmp_path: Path, one_thread: None) -> None:
    model = make_tiny_llama()
    measured = measure_cost_curve(model, torch.device("cpu"), context=32, reps=1)
    # Tiny-model timings are noise: only the shape of the result is certain.
    assert measured.rel(1) == 1.0 and min(measured.ys) > 0 and measured.xs == list(SIZES)
    path = tmp_path / "curve.json"

    def measure() -> CostCurve:
        return measure_cost_curve(model, torch.device("cpu"), context=32, reps=1)

    first = load_or_measure(measure, path)
    assert path.exists()
    cached = '{"version": %d, "relative_cost": {"1": 1.0, "4": %s, "64": 7.0}}'
    path.write_text(cached % (CURVE_VERSION, "1.5"))
    assert load_or_measure(measure, path).rel(64) == 7.0
    # A curve of the old verification path, or one measured under heavy load: re-measured.
    path.write_text(cached % (CURVE_VERSION - 1, "1.5"))
    assert load_or_measure(measure, path).xs == first.xs
    path.write_text(cached % (CURVE_VERSION, "6.0"))
    assert load_or_measure(measure, path).xs == first.xs
    # Measured in the withdrawn exact mode (padded attention): not these costs.
    exact = {"version": CURVE_VERSION, "relative_cost": {"1": 1.0, "64": 7.0}, "exact": True}
    path.write_text(json.dumps(exact))
    assert load_or_measure(measure, path).xs == first.xs
    assert "exact" not in json.loads(path.read_text())
    assert json.loads(path.read_text())["version"] == CURVE_VERSION
    for degenerate in ({}, {"1": 0.0, "4": 1.0}, {"1": 1.0, "4": -1.0}):
        path.write_text(json.dumps({"version": CURVE_VERSION, "relative_cost": degenerate}))
        assert load_or_measure(measure, path).xs == first.xs
    path.write_text("garbage")  # unreadable: measured again
    assert load_or_measure(measure, path).xs == first.xs
