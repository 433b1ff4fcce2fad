"""The cost curve (engines/costs/): interpolation, its long-context parts and their cache,
its measurement through the Engine interface on a fake clock, and the tracker that refits it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from samchat.engines.costs import CostCurve, CostTracker, MeasurementCancelled
from samchat.engines.costs.cache import load_or_measure
from samchat.engines.costs.measurement import measure_engine
from tests.fakes import ClockedEngine


def test_cost_curve_interpolates_between_measured_points() -> None:
    curve = CostCurve({1: 2.0, 2: 2.5, 8: 2.4, 16: 4.0})
    assert curve.rel(1) == 1.0
    assert curve.rel(2) == 1.25
    assert curve.rel(8) == 1.2  # a measured dip is kept: some shapes get faster kernels
    assert curve.rel(5) == pytest.approx(1.225)
    assert curve.rel(12) == pytest.approx(1.6)
    assert curve.rel(32) > curve.rel(16)  # extrapolated beyond the last point


def test_cost_curve_never_falls_beyond_its_last_point() -> None:
    curve = CostCurve({1: 1.0, 48: 2.4, 64: 2.2})  # a dip between the last two points
    assert curve.rel(64) == pytest.approx(2.2)
    assert curve.rel(200) == pytest.approx(2.2)


def test_a_curve_with_a_long_context_part_is_priced_at_the_context(tmp_path: Any) -> None:
    """Verification after a long context costs relatively more (llama.cpp): `at(context)`
    follows the short curve up to its context, each longer one from its context on, linear in
    log(context) between; the cache keeps every part."""
    short = CostCurve({1: 1.0, 2: 1.6, 4: 2.4, 64: 25.0})
    mid = CostCurve({1: 1.0, 2: 1.9, 4: 3.0, 16: 9.0}, context=1024)
    mid.long = CostCurve({1: 1.0, 2: 2.0, 4: 3.2, 16: 10.0}, context=2048)
    short.long = mid
    assert short.at(100) is short and short.at(256) is short
    assert short.at(1024).rel(4) == pytest.approx(3.0)
    assert short.at(2048).rel(4) == pytest.approx(3.2)
    assert short.at(9000).rel(2) == pytest.approx(2.0)  # held beyond the longest context
    middle = short.at(512)  # halfway from 256 to 1,024 in log(context)
    assert middle.rel(2) == pytest.approx(1.75) and middle.rel(4) == pytest.approx(2.7)
    assert middle.long is None and middle.at(4000) is middle
    upper = short.at(1448)  # ~halfway from 1,024 to 2,048
    assert upper.rel(4) == pytest.approx(3.1, abs=0.002)
    plain = CostCurve({1: 1.0, 4: 2.0})  # no long part (torch): the same at every context
    assert plain.at(5000) is plain

    path = tmp_path / "curve.json"

    def measure() -> CostCurve:
        return short

    load_or_measure(measure, path)
    data = json.loads(path.read_text())
    assert data["context"] == 256 and data["long"]["context"] == 1024
    assert data["long"]["long"]["context"] == 2048

    def fail() -> CostCurve:
        raise AssertionError("the cached curve should have been read")

    again = load_or_measure(fail, path)
    assert again.long is not None and again.at(2048).rel(4) == pytest.approx(3.2)
    assert again.at(512).rel(4) == pytest.approx(2.7)


def test_engine_curve_prices_a_draft_as_decoding_meets_it() -> None:
    """A draft replaces one of a run of one-token forwards: its cost is its own forward plus
    what the one-token forward after it loses, against one-token forwards in a row. Timing the
    sizes back to back (as before) made every reference forward pay a switch, and drafts look
    cheap (2 rows: 1.4x one here, against 5x)."""
    engine = ClockedEngine(switch=1.5)
    curve = measure_engine(engine, 100, context=8, reps=3, long_contexts=(16,), clock=engine.clock)
    assert curve.rel(1) == 1.0
    for n in (2, 4, 64):
        assert curve.rel(n) == pytest.approx(n + 3.0)  # n + 1.5, then 1 + 1.5, less 1
    assert curve.long is not None and curve.long.context == 16
    assert curve.long.rel(16) == pytest.approx(19.0)
    assert engine.read == 16  # the long context extends the short one: no token read twice
    assert engine.length == 0  # emptied afterwards


def test_a_stopped_measurement_leaves_the_engine_empty() -> None:
    """A session's own engine may be the one timed: stopped or failed, it keeps no random rows."""
    engine = ClockedEngine()
    asked = iter(range(1000))
    with pytest.raises(MeasurementCancelled):
        measure_engine(
            engine, 100, context=8, reps=3, clock=engine.clock, cancelled=lambda: next(asked) > 5
        )
    assert engine.read == 8 and engine.length == 0
    assert measure_engine(engine, 100, reps=0, clock=engine.clock).xs == [1]  # nothing timed


def test_engine_curve_waits_for_the_logits_as_decoding_does() -> None:
    """Timing only the call of an asynchronous forward measured its launch: every size looked as
    cheap as one row, a flat curve that would plan 64-row trees."""
    engine = ClockedEngine(asynchronous=True)
    curve = measure_engine(engine, 100, context=8, reps=3, clock=engine.clock)
    for n in (2, 8, 64):
        assert curve.rel(n) == pytest.approx((n + 1.2 - 1.1) / 1.1)


def test_cost_tracker_refits_the_curve_from_real_forwards() -> None:
    base = CostCurve({1: 1.0, 8: 1.2, 64: 2.0})
    tracker = CostTracker(base, every=10, min_samples=3)
    refreshed = False
    for i in range(40):  # a loaded machine: 8-token forwards cost 3x a single token
        refreshed |= tracker.record(1 if i % 2 else 8, 0.1 if i % 2 else 0.3)
    assert refreshed
    assert tracker.curve.rel(8) == pytest.approx(3.0, rel=0.05)
    # Unobserved bigger sizes: the base scaled like the observed neighbour, never cheaper.
    assert tracker.curve.rel(64) == pytest.approx(2.0 * 3.0 / 1.2, rel=0.05)
    only_drafts = CostTracker(base, every=5)
    assert not any(only_drafts.record(8, 0.3) for _ in range(20))  # no baseline: keep base
    assert only_drafts.curve is base
