"""The weights a forward reads whole, copied into memory held in 2 MB pages where the system
offers them (transparent huge pages).

A step reads every byte of the tiles once, front to back. Mapped from the kept file they sit in
4 KB pages: each page is a miss in the CPU's address cache and a stop for its prefetchers, and
the forward waits on both. In 2 MB pages the same bytes read faster (docs/benchmarks.md). The
copy is read from the file, not through the map, so the file's pages stay out of the process's
resident memory; what the forward reads only in part (the embedding's rows) stays mapped and is
paged in as it is looked up.

Getting the pages is timed as they come: a virtual machine whose host takes back the memory it
frees may make each first touch of a page wait for the host, and then the copy is given up for
the map."""

from __future__ import annotations

import ctypes
import math
import mmap
import os
import time
from dataclasses import dataclass
from pathlib import Path

import torch

HUGE = 1 << 21
# The copy is given up where it would take longer than this per GB (measured as it goes, a
# chunk at a time): the map then costs nothing at load and the steps stay as they were.
BUDGET_S_PER_GB = 0.5
_CHUNK = 16 << 20
_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")
_ALIGN = 64  # the kernels' aligned vector loads


@dataclass(frozen=True)
class Piece:
    """A tensor's place in the kept file."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    at: int
    nbytes: int

    def view_in(self, buffer: mmap.mmap, offset: int) -> torch.Tensor:
        """The tensor as a view of its bytes at `offset` in `buffer` (which it keeps alive)."""
        count = self.nbytes // torch.empty(0, dtype=self.dtype).element_size()
        flat = torch.frombuffer(buffer, dtype=self.dtype, count=count, offset=offset)
        return flat.view(self.shape)


def offered() -> bool:
    """Whether a region advised to take huge pages gets them here ("always" or "madvise")."""
    try:
        chosen = _SETTING.read_text()
    except OSError:
        return False
    return "[always]" in chosen or "[madvise]" in chosen


def read_into_huge(fd: int, pieces: list[Piece]) -> dict[str, torch.Tensor] | None:
    """The pieces of the open file `fd`, read into one anonymous region advised to take huge
    pages, each at an aligned offset, as tensors viewing it (they keep it alive); None where
    getting the memory ran over BUDGET_S_PER_GB (nothing is kept then)."""
    places, size = [], 0
    for p in pieces:
        places.append(size)
        size += math.ceil(p.nbytes / _ALIGN) * _ALIGN
    if size == 0:
        return {}
    try:
        region = _anonymous(math.ceil(size / HUGE) * HUGE + HUGE)
    except OSError:  # no room, or no such advice here: the map serves
        return None
    start = ctypes.addressof(ctypes.c_char.from_buffer(region))
    first = (-start) % HUGE  # the region's first 2 MB boundary
    budget, began, done = BUDGET_S_PER_GB * size / 1e9, time.perf_counter(), 0
    with memoryview(region) as view:
        for p, place in zip(pieces, places, strict=True):
            for lo in range(0, p.nbytes, _CHUNK):
                _read_fully(
                    fd,
                    view[first + place + lo : first + place + min(p.nbytes, lo + _CHUNK)],
                    p.at + lo,
                    p.name,
                )
                done += min(p.nbytes, lo + _CHUNK) - lo
                if (time.perf_counter() - began) * size / done > budget:
                    view.release()
                    region.close()
                    return None
    return {
        p.name: p.view_in(region, first + place) for p, place in zip(pieces, places, strict=True)
    }


def _anonymous(nbytes: int) -> mmap.mmap:
    """Private anonymous memory advised to take huge pages (shared anonymous memory is shmem,
    whose huge pages follow another setting)."""
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE)
    region.madvise(mmap.MADV_HUGEPAGE)
    return region


def _read_fully(fd: int, into: memoryview, at: int, name: str) -> None:
    done = 0
    while done < len(into):  # pread may return fewer bytes than asked
        got = os.preadv(fd, [into[done:]], at + done)
        if got <= 0:
            raise ValueError(f"it is cut short (reading {name})")
        done += got
