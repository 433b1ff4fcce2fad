"""Measuring a cost curve through the Engine interface, as decoding meets it: on an engine of
its own, with random tokens."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from samchat.engines.costs.curve import SIZES, CostCurve
from samchat.errors import SamchatError

if TYPE_CHECKING:
    from samchat.engines.base import Engine


class MeasurementCancelled(SamchatError):
    """A cost-curve measurement stopped because its caller asked (nothing is cached)."""


def measure_engine(
    engine: Engine,
    vocab: int,
    context: int = 256,
    reps: int = 5,
    long_contexts: tuple[int, ...] = (),
    clock: Callable[[], float] = time.perf_counter,
    cancelled: Callable[[], bool] | None = None,
) -> CostCurve:
    """The cost curve through the Engine interface, on an engine of its own (its cache is reset
    and filled with random tokens); also after each of long_contexts tokens (the chain of
    `long` curves). `cancelled()` true stops it (MeasurementCancelled) within a forward."""
    gen = random.Random(0)
    stream = [gen.randrange(vocab) for _ in range(max(context, *long_contexts, 0))]
    engine.reset()
    try:  # emptied however it ends: a session's own engine must not keep random rows
        engine.prefill(stream[:context])
        curve = _measure_engine_at(engine, gen, vocab, context, reps, SIZES, clock, cancelled)
        last = curve
        for long_context in sorted(long_contexts):
            if long_context <= last.context:
                continue
            # The cache keeps the context measured before: only the tokens after it are read.
            engine.prefill(stream[last.context : long_context])
            # Up to 16 inputs (beyond, the curve goes on along its last slope), fewer rounds:
            # the long forwards are the slow ones, and this runs the first time a model is used.
            sizes = tuple(n for n in SIZES if n <= 16)
            last.long = _measure_engine_at(
                engine, gen, vocab, long_context, min(reps, 3), sizes, clock, cancelled
            )
            last = last.long
    finally:
        engine.reset()
    return curve


def _measure_engine_at(
    engine: Engine,
    gen: random.Random,
    vocab: int,
    context: int,
    reps: int,
    sizes: tuple[int, ...],
    clock: Callable[[], float] = time.perf_counter,
    cancelled: Callable[[], bool] | None = None,
) -> CostCurve:
    """Each size as decoding meets it: a draft forward between one-token forwards, priced with
    the one-token forward after it (a switch of batch shape costs both: llama.cpp rebuilds its
    graph), against one-token forwards in a row. Timing the sizes back to back instead put a
    64-row forward before every one-token reference and made drafts look cheaper than decoding
    found them (docs/benchmarks.md). The engine holds `context` tokens."""
    inputs = {n: [gen.randrange(vocab) for _ in range(n)] for n in sorted({1, *sizes})}

    def timed(n: int) -> float:
        if cancelled is not None and cancelled():
            raise MeasurementCancelled("the cost-curve measurement was stopped")
        t0 = clock()
        # Read a logit as decoding does: a GPU returns before its work is done.
        float(engine.forward(inputs[n])[-1, 0])
        dt = clock() - t0
        engine.crop(context)
        return dt

    plain: list[float] = []
    drafted: dict[int, list[float]] = {n: [] for n in sizes if n > 1}
    for rnd in range(reps + 1):  # round 0 warms up
        for n in drafted:
            before = timed(1)
            dt = timed(n) + timed(1)
            if rnd > 0:
                plain.append(before)
                drafted[n].append(dt)
    points = {1: 1.0}
    if not plain:  # no draft size, or no timed round
        return CostCurve(points, context=context)
    t1 = statistics.median(plain)
    for n, ts in drafted.items():
        points[n] = max(statistics.median(ts) - t1, t1) / t1  # never cheaper than a plain step
    return CostCurve(points, context=context)
