"""How much memory a load may still take here, read in one place: the torch engine's GGUF
conversion and the flat engine's packing refuse a model that would not fit before starting,
rather than be killed by the kernel halfway.

The reading goes through a MemoryReading, so a test can put a typed fake in its place
(`use_reading`) and run the real loader against it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol


class MemoryReading(Protocol):
    def available(self) -> int | None:
        """Bytes of memory this process can still use, or None where the system does not say."""
        ...


def _cgroup_room() -> int | None:
    """What the cgroup (v2) this process runs in still lets it allocate, or None if unlimited."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


class SystemMemory:
    """MemAvailable from /proc/meminfo (the free pages where there is none), capped by a
    container's limit."""

    def available(self) -> int | None:
        room: int | None = None
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    room = int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError, IndexError):
            room = None
        if room is None:
            try:
                room = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (AttributeError, ValueError, OSError):
                room = None
        cgroup = _cgroup_room()
        if cgroup is not None:
            room = cgroup if room is None else min(room, cgroup)
        return room


_reading: MemoryReading = SystemMemory()


def available_memory() -> int | None:
    """Bytes of memory this process can still use, or None when the system does not say."""
    return _reading.available()


def use_reading(reading: MemoryReading) -> MemoryReading:
    """Reads memory through `reading` from now on; returns the one it replaces."""
    global _reading
    previous, _reading = _reading, reading
    return previous


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"
