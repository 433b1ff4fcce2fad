"""Refining a cost curve from the forwards decoding really does."""

from __future__ import annotations

from samchat.engines.costs.curve import SIZES, CostCurve


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
