"""How many of this process's cores sat idle between two looks, from the kernel's counts
(/proc/stat, Linux): on fewer threads, a core gone idle says the load that sent the flat engine
there has left (threads.py). Where the counts cannot be read, every look answers None."""

from __future__ import annotations

import os
from pathlib import Path

STAT = Path("/proc/stat")
# Fewer ticks than this between looks (the kernel counts in hundredths of a second per core)
# say too little: the look answers None and the next one measures from the same start.
LEAST_TICKS = 20


class IdleCores:
    """`look()`: the cores idle on average since the last look that answered (at most the
    process's cores, None where unknown)."""

    def __init__(self, stat: Path = STAT, cpus: set[int] | None = None) -> None:
        self._stat = stat
        if cpus is None and hasattr(os, "sched_getaffinity"):
            cpus = set(os.sched_getaffinity(0))
        self._names = {f"cpu{c}" for c in cpus} if cpus is not None else None
        self._start = self._read()

    def _read(self) -> tuple[int, int, int] | None:
        """Idle ticks, all ticks and cores counted: the process's cores, summed."""
        try:
            text = self._stat.read_text()
        except OSError:
            return None
        idle = total = cores = 0
        for line in text.splitlines():
            name, _, rest = line.partition(" ")
            if name == "cpu" or not name.startswith("cpu"):
                continue
            if self._names is not None and name not in self._names:
                continue
            try:
                ticks = [int(v) for v in rest.split()]
            except ValueError:
                return None
            if len(ticks) < 4:
                return None
            # user nice system idle iowait irq softirq steal (guests are counted in user)
            idle += ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            total += sum(ticks[:8])
            cores += 1
        return (idle, total, cores) if cores else None

    def look(self) -> float | None:
        now = self._read()
        start = self._start
        if now is None or start is None or now[2] != start[2]:
            self._start = now
            return None
        ticks = now[1] - start[1]
        if ticks < LEAST_TICKS:
            return None
        self._start = now
        return now[2] * max(0, now[0] - start[0]) / ticks
