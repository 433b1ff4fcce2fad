"""The idle cores the flat engine's thread choice looks at (idle.py): the kernel's counts read
from a file in /proc/stat's form, and from the real one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from samchat.engines.flat.idle import LEAST_TICKS, IdleCores


def _stat(path: Path, cpus: dict[int, tuple[int, int]]) -> None:
    """A /proc/stat with each core's busy and idle ticks (busy split over user and system)."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    for c, (busy, idle) in cpus.items():
        lines.append(f"cpu{c} {busy - busy // 2} 0 {busy // 2} {idle} 0 0 0 0 0 0")
    lines += ["intr 12345 0 0", "ctxt 99", "cpuset 1"]
    path.write_text("\n".join(lines) + "\n")


def test_the_idle_share_of_the_process_cores_between_looks(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    _stat(stat, {0: (100, 100), 1: (100, 100), 2: (0, 500)})
    cores = IdleCores(stat, cpus={0, 1})  # core 2 is not the process's
    _stat(stat, {0: (200, 100), 1: (100, 200), 2: (0, 900)})
    assert cores.look() == pytest.approx(1.0)  # of 200 ticks on two cores, 100 idle
    _stat(stat, {0: (300, 100), 1: (200, 100 + 200), 2: (0, 900)})
    assert cores.look() == pytest.approx(2 * 100 / 300)  # 300 ticks, 100 idle
    # Too few ticks say nothing, and the next look measures from the same start.
    _stat(stat, {0: (305, 100), 1: (200, 305), 2: (0, 900)})
    assert cores.look() is None
    _stat(stat, {0: (310, 140), 1: (200, 350), 2: (0, 900)})
    assert cores.look() == pytest.approx(2 * 90 / 100)  # from (300, 100) and (200, 300)
    assert LEAST_TICKS <= 20


def test_unreadable_counts_answer_none(tmp_path: Path) -> None:
    assert IdleCores(tmp_path / "none").look() is None
    stat = tmp_path / "stat"
    stat.write_text("cpu0 1 2 x 4\n")
    assert IdleCores(stat, cpus={0}).look() is None
    _stat(stat, {0: (10, 10)})
    cores = IdleCores(stat, cpus={0})
    _stat(stat, {0: (50, 50)})
    stat.write_text("cpu0 1 2\n")  # a short line: not the kernel's form
    assert cores.look() is None


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="the kernel's counts are Linux's")
def test_a_core_kept_busy_is_not_counted_idle() -> None:
    cores = IdleCores()
    count = len(os.sched_getaffinity(0))
    end = time.perf_counter() + 0.5
    while time.perf_counter() < end:  # this thread busy on one of them
        pass
    idle = cores.look()
    assert idle is not None and 0 <= idle <= count - 0.5
