"""How many threads the flat engine's forward runs on, chosen while it runs.

On a quiet machine every core is fastest. With another process busy on one of them, a team
that spins waiting for its slowest member slows far more than a team of one thread fewer. No
fixed count wins both ways, and a row's numbers are the same on any count, so the engine times
the other count now and then, on forwards of the same number of rows, and keeps the faster: a
switch never changes a token. A trial that loses makes the next one wait twice as long (a
quiet machine pays almost nothing); the kept count slowing down brings one at once. On fewer
threads, a core gone idle brings one at once too: a long load doubles the waits, and the machine
quiet again would otherwise stay on fewer threads for up to LONGEST_WAIT forwards.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

# Forwards of up to this many rows are timed and compared (prompts read in pieces are not).
MOST_ROWS = 16
# Forwards between trials: the first wait, and the longest after losing trials.
FIRST_WAIT = 48
LONGEST_WAIT = 1024
# Timed forwards a trial runs on the other count.
TRIAL = 3
# The other count is kept when each of its trial forwards takes at most this share of the kept
# count's typical one.
WIN = 0.92
# The kept count's typical forward this much slower than its best brings a trial at once.
SLOWED = 1.3
# A row count's typical forward: the median of its last RECENT on the kept count (one slow
# forward, a page fault or a burst elsewhere, moves it little).
RECENT = 5
# On fewer threads, the idle cores are looked at every LOOK forwards: at least IDLE_CORE of a
# core idle, after a look that found less (or since the switch), brings a trial.
LOOK = 16
IDLE_CORE = 0.5

_lock = threading.Lock()
_default: list[int] = []


def default_threads() -> int:
    """torch's thread count as this process started (its default, or OMP_NUM_THREADS): read
    once, since an engine sets another count during its forwards."""
    import torch

    with _lock:
        if not _default:
            _default.append(torch.get_num_threads())
        return _default[0]


@dataclass
class ThreadChoice:
    """The thread count to run each forward on (`pick`), learnt from the times of the
    forwards run (`timed`). `most` is the machine's count; one thread fewer is the other.
    Not adaptive: always `most`. `idle`: the cores idle since its last call (idle.py), or None
    where unknown."""

    most: int
    adaptive: bool = True
    first_wait: int = FIRST_WAIT
    idle: Callable[[], float | None] | None = None
    current: int = 0
    switches: int = 0
    ran: dict[int, int] = field(default_factory=dict)  # forwards run on each count
    # rows -> the kept count's last forwards' seconds, and the best of their medians.
    recent: dict[int, deque[float]] = field(default_factory=dict)
    best: dict[int, float] = field(default_factory=dict)
    _wait: int = 0
    _until_trial: int = 0
    _trial: list[tuple[int, float]] = field(default_factory=list)
    _trying: bool = False
    _look_in: int = 0
    _busy_seen: bool = False

    def __post_init__(self) -> None:
        self.current = self.current or self.most
        self._wait = self._until_trial = self.first_wait

    @property
    def counts(self) -> tuple[int, ...]:
        return (self.most, self.most - 1) if self.most > 1 and self.adaptive else (self.most,)

    @property
    def other(self) -> int:
        return self.counts[-1] if self.current == self.most else self.most

    def typical(self, rows: int) -> float | None:
        """The kept count's typical forward of `rows` rows, in seconds (None: not timed)."""
        times = self.recent.get(rows)
        return statistics.median(times) if times else None

    def pick(self, rows: int) -> int:
        """The thread count for the next forward, of `rows` rows."""
        if self._trying and rows <= MOST_ROWS:
            return self.other
        return self.current

    def timed(self, threads: int, rows: int, seconds: float) -> None:
        """A forward of `rows` rows took `seconds` on `threads` threads."""
        self.ran[threads] = self.ran.get(threads, 0) + 1
        if rows > MOST_ROWS or len(self.counts) == 1:
            return
        if self._trying:
            if threads == self.other:
                self._trial.append((rows, seconds))
                if len(self._trial) >= TRIAL:
                    self._judge()
            return
        if threads != self.current:
            return
        self.recent.setdefault(rows, deque(maxlen=RECENT)).append(seconds)
        typical = self.typical(rows)
        assert typical is not None
        best = self.best.get(rows)
        if len(self.recent[rows]) >= 3 and (best is None or typical < best):
            self.best[rows] = typical
        elif best is not None and typical > SLOWED * best:
            self._wait, self._until_trial = self.first_wait, 1  # slowed: look now, and soon
        if self.current < self.most:
            self._look()
        self._until_trial -= 1
        if self._until_trial <= 0:
            self._trying, self._trial = True, []

    def _look(self) -> None:
        """Every LOOK forwards on fewer threads: a core gone idle brings a trial now."""
        self._look_in -= 1
        if self.idle is None or self._look_in > 0:
            return
        self._look_in = LOOK
        idle = self.idle()
        if idle is None:
            return
        if idle < IDLE_CORE:
            self._busy_seen = True
        elif self._busy_seen:
            self._busy_seen = False
            self._until_trial = 1

    def _judge(self) -> None:
        ratios = []
        for rows, seconds in self._trial:
            typical = self.typical(rows)
            if typical is not None:
                ratios.append(seconds / typical)
        self._trying = False
        if ratios and max(ratios) <= WIN:
            # The other count is faster: kept from now on, its times the ones to beat.
            self.recent, self.best = {}, {}
            for rows, seconds in self._trial:
                self.recent.setdefault(rows, deque(maxlen=RECENT)).append(seconds)
            self.current = self.other
            self.switches += 1
            self._wait = self.first_wait
            if self.current < self.most and self.idle is not None:
                # Sent here by a load: its going is news. The look starts now.
                self._busy_seen, self._look_in = True, LOOK
                self.idle()
        elif ratios:
            # Kept: its times now are the ones to keep (a slower machine is not news twice).
            self._wait = min(2 * self._wait, LONGEST_WAIT)
            for rows in {rows for rows, _ in self._trial}:
                typical = self.typical(rows)
                if typical is not None:
                    self.best[rows] = typical
        self._until_trial = self._wait
