"""What a verification forward costs on this machine: the cost curve (time of n new tokens
relative to one), its measurement through the Engine interface as decoding meets it, the
tracker that refines it from real steps, and one memo of measured curves that every engine uses
(in this process, and cached on disk by what was measured).

On a GPU the curve is nearly flat up to ~64 rows; on a CPU it climbs fast, so a draft only pays
when the tokens it is expected to add outweigh its extra cost (samchat.decoding.policy decides).
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from samchat.engines.base import DRAFT_ROWS
from samchat.engines.kernels import KernelPlan, plan_from
from samchat.errors import SamchatError

if TYPE_CHECKING:
    from samchat.engines.base import Engine

log = logging.getLogger(__name__)

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, DRAFT_ROWS)
# Bumped when the verification forward or its measurement changes: cached curves are re-measured.
CURVE_VERSION = 5
# A cached curve above this at 4 inputs was measured under heavy load (batching 4 rows costs
# no more than 4 one-row forwards and the switches of batch shape around them): measure again.
_PLAUSIBLE_REL4 = 5.0
# The model's own kernels on the reference 2-core CPU (docs/benchmarks.md, "Machines"): a
# conservative stand-in for tests and screenshots; sessions measure the real verification path.
DEFAULT_CPU = {1: 1.0, 2: 1.25, 4: 1.3, 8: 1.6, 16: 1.6, 32: 2.0, 48: 2.4, 64: 2.9}
DEFAULT_GPU = {1: 1.0, 16: 1.02, 32: 1.05, 64: 1.15}
# Where a wide verification costs at most this many one-row forwards the curve counts as flat
# (a GPU): drafts may use every row, and Token Recycling learns from the whole prompt.
FLAT_COST = 1.5


class CostCurve:
    """Relative cost of verifying n input tokens in one forward (1.0 for n = 1).

    A `fixed` curve is not refined from the forwards decoding times (a curve given on purpose:
    the benchmark's simulated flat GPU-like costs, or one read from a file). `kernels` is the
    plan the torch engine measured the curve with (kernels.py; None elsewhere). `long`, where
    an engine measured one, is the curve after `long.context` cached tokens (itself with a
    `long` of its own, for a third context): verifying after a long context can cost relatively
    more (llama.cpp on a CPU, docs/benchmarks.md), and `at(context)` interpolates between them."""

    def __init__(
        self,
        points: dict[int, float],
        fixed: bool = False,
        kernels: KernelPlan | None = None,
        context: int = 256,
        long: CostCurve | None = None,
    ) -> None:
        self.fixed = fixed
        self.kernels = kernels
        self.context = context  # cached tokens the points were measured after
        self.long = long
        xs = sorted(points)
        # Not forced monotone: on a CPU some sizes really are cheaper than smaller ones (the
        # BLAS kernel a shape gets), and the choosers weigh every size against its own cost.
        ys = [points[x] for x in xs]
        base = ys[0] if xs[0] == 1 else 1.0
        self.xs = xs
        self.ys = [y / base for y in ys]
        self._table = [self._interp(n) for n in range(xs[-1] + 1)]

    def _interp(self, n: int) -> float:
        xs, ys = self.xs, self.ys
        if n <= xs[0]:
            return ys[0]
        for i in range(1, len(xs)):
            if n <= xs[i]:
                x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
                return y0 + (y1 - y0) * (n - x0) / (x1 - x0)
        # Never falling beyond the last point, whatever dip the last two points show.
        slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])) if len(xs) > 1 else 0.0
        return ys[-1] + slope * (n - xs[-1])

    def rel(self, n_inputs: int) -> float:
        if n_inputs < len(self._table):
            return self._table[n_inputs]
        return self._interp(n_inputs)

    @property
    def max_inputs(self) -> int:
        return self.xs[-1]

    def to_dict(self) -> dict[str, float]:
        return {str(x): y for x, y in zip(self.xs, self.ys, strict=True)}

    def at(self, context: int) -> CostCurve:
        """The curve for verifying after `context` cached tokens: this one up to its own
        context, the longer ones from theirs on, linear in log(context) in between (the cost
        climbs fast after a few hundred tokens, then levels off)."""
        long = self.long
        if long is None or context <= self.context or long.context <= self.context:
            return self
        if context >= long.context:
            return long.at(context)
        t = math.log(context / self.context) / math.log(long.context / self.context)
        xs = sorted(set(self.xs) | set(long.xs))
        points = {x: (1.0 - t) * self.rel(x) + t * long.rel(x) for x in xs}
        return CostCurve(points, fixed=self.fixed, kernels=self.kernels, context=context)

    def long_parts(self) -> dict[str, Any]:
        """This curve and its longer ones as nested JSON (the cache file's and the benchmark's
        "long")."""
        out: dict[str, Any] = {"context": self.context, "relative_cost": self.to_dict()}
        if self.long is not None:
            out["long"] = self.long.long_parts()
        return out

    @classmethod
    def flat(cls, max_inputs: int = DRAFT_ROWS) -> CostCurve:
        """Verifying up to max_inputs rows costs one row: what a GPU nearly gives."""
        return cls({1: 1.0, max_inputs: 1.0}, fixed=True)

    @classmethod
    def from_file(cls, path: Path) -> CostCurve:
        """A fixed curve from JSON: {"relative_cost": {"1": 1.0, "8": 1.6, ...}} (the cost
        cache's format) or the bare mapping."""

        try:
            data = json.loads(path.read_text())
            points = data.get("relative_cost", data) if isinstance(data, dict) else None
            if not isinstance(points, dict) or not points:
                raise ValueError("no relative costs")
            curve = cls({int(k): float(v) for k, v in points.items()}, fixed=True)
        except OSError as exc:
            raise SamchatError(f"cannot read the cost curve {path}: {exc.strerror}") from exc
        except (ValueError, TypeError, AttributeError, ZeroDivisionError) as exc:
            raise SamchatError(
                f"{path} is not a cost curve ({exc}); give JSON like "
                '{"relative_cost": {"1": 1.0, "8": 1.6, "64": 2.9}}'
            ) from exc
        if min(curve.ys) <= 0 or curve.xs[0] != 1:
            raise SamchatError(f"{path}: a cost curve starts at 1 input and has positive costs")
        return curve

    @classmethod
    def default(cls, device_type: str) -> CostCurve:
        return cls(DEFAULT_CPU if device_type == "cpu" else DEFAULT_GPU)


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


class CostTracker:
    """Refines a cost curve from the forwards decoding really does: the machine's load changes,
    and a curve measured once may be off. Keeps an EMA of forward time per input-size bucket."""

    def __init__(self, base: CostCurve, every: int = 32, min_samples: int = 4) -> None:
        self.base = base
        self.curve = base
        self.every = every
        self.min_samples = min_samples
        self._ema: dict[int, float] = {}
        self._count: dict[int, int] = {}
        self._since = 0

    def rebase(self, base: CostCurve) -> None:
        """A new reply: the measured curve at its context. The times observed so far stay and
        refine it again at the next refresh."""
        self.base = base
        self.curve = base
        self._since = max(0, self.every - 1)  # the next forward refreshes from what was seen

    @staticmethod
    def _bucket(n_inputs: int) -> int:
        for s in SIZES:
            if n_inputs <= s:
                return s
        return SIZES[-1]

    def record(self, n_inputs: int, seconds: float) -> bool:
        """Add one forward; True when the curve was just refreshed (never for a fixed one)."""
        if self.base.fixed:
            return False
        b = self._bucket(n_inputs)
        old = self._ema.get(b)
        self._ema[b] = seconds if old is None else 0.9 * old + 0.1 * seconds
        self._count[b] = self._count.get(b, 0) + 1
        self._since += 1
        if self._since < self.every:
            return False
        self._since = 0
        t1 = self._ema.get(1)
        if t1 is None or self._count.get(1, 0) < self.min_samples:
            return False
        seen = {
            b2: t / t1
            for b2, t in self._ema.items()
            if b2 > 1 and self._count[b2] >= self.min_samples
        }
        points: dict[int, float] = {1: 1.0}
        factor = 1.0  # how much dearer than the base the nearest smaller observed size ran
        for x in sorted(set(self.base.xs) | set(seen)):
            if x in seen:
                points[x] = seen[x]
                base_x = self.base.rel(x)
                factor = seen[x] / base_x if base_x > 0 else 1.0
            elif x > 1:
                # Unobserved: the base, scaled up like its observed neighbour, so load that
                # slows observed drafts never makes unobserved bigger ones look cheaper.
                points[x] = self.base.rel(x) * max(1.0, factor)
        self.curve = CostCurve(points)
        return True


def load_cached(cache_file: Path | None) -> CostCurve | None:
    """The curve cached in cache_file; None if there is none, or it is unreadable or
    degenerate (to be measured again)."""
    try:
        if cache_file is None:
            return None
        data = json.loads(cache_file.read_text())
        # "exact": measured in the withdrawn exact mode (padded attention), not these costs.
        if data.get("version") == CURVE_VERSION and not data.get("exact"):
            kernels = plan_from(data["kernels"]) if "kernels" in data else None
            points = {int(k): float(v) for k, v in data["relative_cost"].items()}
            curve = CostCurve(points, kernels=kernels, context=int(data.get("context", 256)))
            last, part = curve, data
            while "long" in part:
                part = part["long"]
                long_points = {int(k): float(v) for k, v in part["relative_cost"].items()}
                last.long = CostCurve(long_points, context=int(part["context"]))
                last = last.long
            if min(curve.ys) > 0 and curve.rel(4) <= _PLAUSIBLE_REL4:
                return curve
    except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError, ArithmeticError):
        pass
    return None


def load_or_measure(
    measure: Callable[[], CostCurve],
    cache_file: Path | None,
    progress: Any = None,
    about: dict[str, str] | None = None,
) -> CostCurve:
    """The curve cached in cache_file, measured once if missing or unreadable (every time
    without a file). `about` (what was measured: model, dtype, CPU...) is saved with it for
    `samchat doctor`."""
    cached = load_cached(cache_file)
    if cached is not None:
        return cached
    message = "measuring this machine's verification cost (once per model)…"
    if progress is not None:
        progress(message)
    else:  # samchat/cli.py shows it on stderr
        log.info(message)
    curve = measure()
    if cache_file is not None:
        save_curve(curve, cache_file, about)
    return curve


_KEPT: set[Path] = set()


def keep_cached(
    curve: CostCurve, cache_file: Path | None, about: dict[str, str] | None = None
) -> None:
    """A curve this process knows (measured, or read from another cache) goes into a cache that
    lacks a readable one; tried once per file per process, however often replies ask."""
    if cache_file is None or cache_file in _KEPT:
        return
    _KEPT.add(cache_file)
    if load_cached(cache_file) is None:
        save_curve(curve, cache_file, about)


def save_curve(curve: CostCurve, cache_file: Path, about: dict[str, str] | None = None) -> None:
    """Keep a measured curve in the cache (load_cached reads it back)."""
    try:
        cache_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        payload: dict[str, Any] = {
            "version": CURVE_VERSION,
            "context": curve.context,
            "relative_cost": curve.to_dict(),
        }
        if curve.long is not None:
            payload["long"] = curve.long.long_parts()
        if curve.kernels is not None:
            payload["kernels"] = curve.kernels.to_dict()
        if about:
            payload["about"] = about
        # Written whole, then renamed: another process reading it meanwhile sees no half file.
        tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload, indent=1))
        os.replace(tmp, cache_file)
    except OSError as exc:  # a read-only cache only costs a re-measure next time
        log.warning("could not save the cost curve to %s: %s", cache_file, exc)


def cached_kernel_plans(costs_dir: Path) -> list[tuple[dict[str, str], KernelPlan]]:
    """The kernel plans measured on this machine so far (what each was measured for, the
    plan), from the cost cache: `samchat doctor` shows them."""
    found: list[tuple[dict[str, str], KernelPlan]] = []
    for path in sorted(costs_dir.glob("*.json")):
        try:
            data = json.loads(path.read_text())
            plan = plan_from(data["kernels"]) if data.get("version") == CURVE_VERSION else None
            about = {str(k): str(v) for k, v in dict(data.get("about", {})).items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        if plan is not None:
            found.append((about, plan))
    return found


class CurveMemo:
    """Measured curves by what they were measured on (a digest of the model, dtype, device,
    CPU and library versions), in this process and in the cost cache: every engine object made
    from the same weights shares one measurement, and one measurement runs at a time (two would
    disturb each other)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.curves: dict[str, CostCurve] = {}

    def known(self, digest: str, cache_file: Path | None) -> CostCurve | None:
        """The curve for digest if this process or the cache has it; never measures."""
        with self.lock:
            curve = self.curves.get(digest) or load_cached(cache_file)
            if curve is not None:
                self.curves[digest] = curve
            return curve

    def get(
        self,
        digest: str,
        cache_file: Path | None,
        measure: Callable[[], CostCurve],
        about: dict[str, str] | None = None,
    ) -> CostCurve:
        """The known curve (kept in `cache_file` too if that lacks it), else measured once."""
        with self.lock:
            curve = self.curves.get(digest)
            if curve is None:
                curve = load_or_measure(measure, cache_file, about=about)
                self.curves[digest] = curve
            else:
                keep_cached(curve, cache_file, about)
            return curve

    def clear(self) -> None:
        with self.lock:
            self.curves.clear()


# The one memo of this process (tests clear it to measure again).
CURVES = CurveMemo()
