"""The host's time per step, priced beside the engine's verification curve.

A drafted step costs the host more than a plain one: the drafters' proposals, a tree's layout,
walking the model's choices, learning from more rows (Token Recycling reads every row's logits).
Where the forward is a few milliseconds that time weighs: a draft that pays on the curve alone
may not pay once it is counted. `HostCosts` tracks it from real steps, as the cost tracker does
the curve: per kind of step (a drafter, a merged tree, plain), a line in the step's inputs fitted
to recent steps' host seconds, and the one-token forward's seconds to express it in. `priced`
then gives the curve a selector compares drafts on: verification plus the host's time, both in
plain steps (a plain step, host time included, costs 1.0).

A kind not drafted for a while has its evidence fade (FADE per step of another kind), so its
price drifts back toward the bare curve and it is tried again: a load spike during a few of its
steps does not price a drafter out for the rest of a session."""

from __future__ import annotations

from typing import Protocol

from samchat.engines.costs import CostCurve
from samchat.names import DraftSource

# Each step of a kind keeps this share of that kind's evidence (about the last 20 steps).
KEEP = 0.95
# Each step of another kind keeps this share of a kind's evidence (see the docstring).
FADE = 0.98
# The bare curve's price counts as this many steps of evidence: a kind's price reaches its
# measured host time as its steps accumulate.
PRIOR_STEPS = 1.0
# A step's host seconds are taken as at most this many times what its kind's fit expects (with
# enough evidence to expect anything): one step preempted on a busy machine is no price.
CLIP = 4.0
# Priced curves are recomputed after this many steps (and whenever the bare curve changes).
REFRESH_EVERY = 16
PLAIN: DraftSource = "plain"


class Prices(Protocol):
    """What a selector compares drafts on: the cost of a step of n inputs, in plain steps."""

    def rel(self, n_inputs: int) -> float: ...


class _Line:
    """Weighted least squares of host seconds against a step's inputs, with fading weights."""

    __slots__ = ("s0", "s1", "s2", "t0", "t1")

    def __init__(self) -> None:
        self.s0 = self.s1 = self.s2 = self.t0 = self.t1 = 0.0

    def scale(self, factor: float) -> None:
        self.s0 *= factor
        self.s1 *= factor
        self.s2 *= factor
        self.t0 *= factor
        self.t1 *= factor

    def add(self, n: float, seconds: float) -> None:
        self.s0 += 1.0
        self.s1 += n
        self.s2 += n * n
        self.t0 += seconds
        self.t1 += n * seconds

    def fit(self) -> tuple[float, float]:
        """(intercept, slope) of host seconds by inputs; the slope never negative (more rows
        never cost the host less), a mean where the inputs barely varied."""
        s0 = self.s0
        if s0 <= 0.0:
            return 0.0, 0.0
        mean_n, mean_t = self.s1 / s0, self.t0 / s0
        var = self.s2 / s0 - mean_n * mean_n
        slope = (self.t1 / s0 - mean_n * mean_t) / var if var > 0.25 else 0.0
        slope = max(0.0, slope)
        return mean_t - slope * mean_n, slope

    def at(self, n: int) -> float:
        a, b = self.fit()
        return max(0.0, a + b * n)


class PricedCurve:
    """A cost curve with one kind of step's host time added, in plain steps (host included)."""

    __slots__ = ("_table", "curve")

    def __init__(self, curve: CostCurve, table: list[float]) -> None:
        self.curve = curve
        self._table = table

    def rel(self, n_inputs: int) -> float:
        if n_inputs < len(self._table):
            return self._table[n_inputs]
        return self._table[-1] + self.curve.rel(n_inputs) - self.curve.rel(len(self._table) - 1)


class HostCosts:
    """Host seconds per step by kind of step, tracked from real steps (see the module's
    docstring); `priced(kind, curve)` is what the selector compares that kind's drafts on."""

    def __init__(self) -> None:
        self._lines: dict[str, _Line] = {}
        self._t1 = 0.0  # the one-token forward's seconds (engine only), running
        self._t1_seen = False  # a one-row forward was timed
        self._since = 0
        self._priced: dict[str, PricedCurve] = {}
        self._base: CostCurve | None = None

    @property
    def t1(self) -> float:
        return self._t1

    def record(self, kind: str, n_inputs: int, host_s: float, engine_s: float, rel: float) -> None:
        """One step of `kind` verified `n_inputs` rows in `engine_s` (`rel` one-token forwards
        on the curve) and spent `host_s` on the host beyond emitting its text."""
        # One-row forwards time t1 themselves; until one is seen, a step's forward over its
        # cost on the curve stands in (a curve that underprices wide rows overstates it).
        if engine_s > 0.0 and rel > 0.0 and (n_inputs == 1 or not self._t1_seen):
            t1 = engine_s / rel
            if n_inputs == 1 and not self._t1_seen:
                self._t1_seen, self._t1 = True, t1
            self._t1 = t1 if self._t1 == 0.0 else 0.9 * self._t1 + 0.1 * t1
        line = self._lines.get(kind)
        if line is None:
            line = self._lines[kind] = _Line()
        elif line.s0 >= 2.0:
            expected = line.at(n_inputs)
            if expected > 0.0:
                host_s = min(host_s, CLIP * expected)
        for other, other_line in self._lines.items():
            if other != kind:
                other_line.scale(FADE)
        line.scale(KEEP)
        line.add(float(n_inputs), host_s)
        self._since += 1

    def seconds(self, kind: str, n_inputs: int) -> float:
        """The host seconds a step of `kind` with `n_inputs` rows is expected to take beyond a
        plain step's (0.0 while the kind has no evidence), shrunk toward 0.0 by the prior."""
        line = self._lines.get(kind)
        if line is None or line.s0 <= 0.0:
            return 0.0
        extra = line.at(n_inputs) - self.plain_seconds()
        return max(0.0, extra) * line.s0 / (line.s0 + PRIOR_STEPS)

    def plain_seconds(self) -> float:
        """A plain step's host seconds (0.0 until one is seen)."""
        line = self._lines.get(PLAIN)
        return line.at(1) if line is not None and line.s0 > 0.0 else 0.0

    def priced(self, kind: str, curve: CostCurve) -> Prices:
        """The cost of a step of `kind` by its inputs, in plain steps, host time included: the
        bare curve where nothing is measured yet or the curve is fixed (a curve given on purpose,
        such as a simulated GPU's, is no place for this machine's host time)."""
        if curve.fixed or self._t1 <= 0.0:
            return curve
        if curve is not self._base or self._since >= REFRESH_EVERY:
            self._base = curve
            self._since = 0
            self._priced.clear()
        priced = self._priced.get(kind)
        if priced is None:
            priced = self._priced[kind] = self._price(kind, curve)
        return priced

    def _price(self, kind: str, curve: CostCurve) -> PricedCurve:
        t1 = self._t1
        plain = self.plain_seconds()
        unit = t1 + plain  # a plain step, engine and host
        a = b = share = 0.0
        line = self._lines.get(kind)
        if line is not None and line.s0 > 0.0:
            a, b = line.fit()
            share = line.s0 / (line.s0 + PRIOR_STEPS)
        table = [
            (curve.rel(n) * t1 + plain + max(0.0, a + b * n - plain) * share) / unit
            for n in range(curve.max_inputs + 1)
        ]
        return PricedCurve(curve, table)

    def per_step_ms(self) -> dict[str, float]:
        """Each kind's host milliseconds at its mean inputs (for reports and tests)."""
        out: dict[str, float] = {}
        for kind, line in self._lines.items():
            if line.s0 > 0.0:
                out[kind] = 1000.0 * line.t0 / line.s0
        return out
