"""A decoding step's clock: its wall time split into the engine's forward and the host's parts
(drafting, the tree's layout, accepting, learning, emitting text), as StepStats reports them and
the policy prices drafts with (policy/hostcost.py)."""

from __future__ import annotations

import time

from samchat.decoding.events import HostTimes, StepStats
from samchat.decoding.verify import VerifyTimes
from samchat.names import DraftSource


class StepTimer:
    """Marks one step's phases in order: made at the step's start, then drafted(), verified(),
    learned(), and stats() once its tokens are committed as text."""

    __slots__ = ("_drafted", "_learned", "_start", "_verified", "verify")

    def __init__(self) -> None:
        self.verify = VerifyTimes()  # filled by verify_step
        self._start = time.perf_counter()
        self._drafted = self._verified = self._learned = self._start

    def drafted(self) -> None:
        self._drafted = time.perf_counter()

    def verified(self) -> None:
        self._verified = time.perf_counter()

    def learned(self) -> None:
        self._learned = time.perf_counter()

    def stats(self, drafter: DraftSource, size: int, accepted: int, forward_s: float) -> StepStats:
        """The step's figures, with its engine seconds and host parts (it ends now)."""
        end = time.perf_counter()
        v = self.verify
        host = HostTimes(
            draft=self._drafted - self._start,
            tree=v.tree,
            accept=max(0.0, self._verified - self._drafted - v.tree - v.engine),
            learn=self._learned - self._verified,
            emit=end - self._learned,
        )
        return StepStats(drafter, size, accepted, forward_s, v.engine, host)
