"""The cost curve: the time of verifying n new tokens in one forward, relative to one, with the
stand-ins used before a machine is measured."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import NotRequired, TypedDict

from samchat.engines.base import DRAFT_ROWS
from samchat.engines.kernels import KernelPlan
from samchat.errors import SamchatError

# The input sizes a curve is measured at (and the tracker's buckets).
SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, DRAFT_ROWS)
# The model's own kernels on the reference 2-core CPU (docs/benchmarks.md, "Machines"): a
# conservative stand-in for tests and screenshots; sessions measure the real verification path.
DEFAULT_CPU = {1: 1.0, 2: 1.25, 4: 1.3, 8: 1.6, 16: 1.6, 32: 2.0, 48: 2.4, 64: 2.9}
DEFAULT_GPU = {1: 1.0, 16: 1.02, 32: 1.05, 64: 1.15}
# Where a wide verification costs at most this many one-row forwards the curve counts as flat
# (a GPU): drafts may use every row, and Token Recycling learns from the whole prompt.
FLAT_COST = 1.5


class LongParts(TypedDict):
    """A curve and its longer ones as JSON: cached tokens, cost by inputs, the next curve."""

    context: int
    relative_cost: dict[str, float]
    long: NotRequired[LongParts]


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

    def long_parts(self) -> LongParts:
        """This curve and its longer ones as nested JSON (the cache file's and the benchmark's
        "long")."""
        out: LongParts = {"context": self.context, "relative_cost": self.to_dict()}
        if self.long is not None:
            out["long"] = self.long.long_parts()
        return out

    @classmethod
    def flat(cls, max_inputs: int = DRAFT_ROWS) -> CostCurve:
        """Verifying up to max_inputs rows costs one row: what a GPU nearly gives."""
        return cls({1: 1.0, max_inputs: 1.0}, fixed=True)

    @classmethod
    def named(cls, name: str) -> CostCurve | None:
        """The curve --cost-curve names in a word ("flat"), or None."""
        return cls.flat() if name == "flat" else None

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
