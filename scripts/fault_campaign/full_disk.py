"""A full disk: imports and replies on a small tmpfs (or under a file-size limit), which must
fail with one clear line and lose nothing committed before."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fault_campaign.check import check_data
from fault_campaign.figures import Figures
from fault_campaign.process import Child
from fault_campaign.texts import write_sources
from samchat.store import Store


@contextlib.contextmanager
def small_disk(where: Path, size_mb: int) -> Iterator[str]:
    """A tmpfs of `size_mb` MiB at `where` when mounting is allowed (root in a container), else
    nothing: the children then get a file-size limit (RLIMIT_FSIZE) instead."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = False
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        mounted = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)],
                capture_output=True,
            ).returncode
            == 0
        )
    try:
        yield "tmpfs" if mounted else "rlimit"
    finally:
        if mounted:
            subprocess.run(["umount", str(where)], capture_output=True)


def _fill(disk: Path, leave: int) -> None:
    """Leave `leave` bytes free on the tmpfs at `disk`."""
    filler = disk / "filler"
    filler.unlink(missing_ok=True)
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as f:
        f.write(b"\0" * max(free - leave, 0))


def _limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes fail with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def full_disk(runs: int, work: Path, rng: random.Random, real_cli: bool) -> Figures:
    fig = Figures("full disk: import and reply")
    disk = work / "disk"
    with small_disk(disk, 8) as how:
        fig.notes = how
        for k in range(runs):
            what = ("import", "reply")[k % 2]
            data = disk / f"data-{k}"
            data.mkdir()
            Store.open(data / "samchat.db").close()  # the schema fits; what comes next may not
            src = work / f"disk-src-{k}"
            sources = write_sources(src, rng, 30) if what == "import" else None
            leave = (
                rng.randint(100_000, 600_000) if what == "import" else rng.randint(4_000, 64_000)
            )
            use_cli = real_cli and k < 2  # the real CLI's error line (it loads the tokenizer)
            samchat = str(Path(sys.executable).with_name("samchat"))
            if how == "tmpfs":
                _fill(disk, leave)
                kw: dict[str, Any] = {}
            else:
                kw = {"preexec_fn": _limit((data / "samchat.db").stat().st_size + leave)}
            env = {"HF_HUB_OFFLINE": "1"}
            if use_cli and what == "import":
                argv = [samchat, "import", str(src), "--data-dir", str(data)]
                child = Child(argv, env=env, **kw)
            elif use_cli:
                question = "Explain suffix automata. " * 20
                argv = [samchat, "ask", question, "--max-new-tokens", "32", "--data-dir", str(data)]
                child = Child(argv, env=env, **kw)
            elif what == "import":
                child = Child.program("import_documents", str(data), str(k), str(src), **kw)
            else:
                child = Child.program("ask_questions", str(data), str(k), "100000", "3000", **kw)
            code = child.wait(600)
            err = child.stderr()
            fig.injected += 1
            if how == "tmpfs":
                (disk / "filler").unlink(missing_ok=True)
            if code == 0:
                fig.note(f"run {k} ({what}): finished without filling the disk")
            errors = [line for line in err.splitlines() if line.startswith("error: ")]
            clear = len(errors) == 1 and "Traceback" not in err and "a bug" not in errors[0]
            full = "full" in err.lower() or "no space" in err.lower() or "too large" in err.lower()
            if use_cli and not clear:
                fig.note(f"run {k} ({what}): not one clear line: {err[-300:]!r}")
            if not full:
                fig.note(f"run {k} ({what}): the error does not say the disk is full")
            if code != 0 and full:
                fig.detected += 1
            result = check_data(data, child.acks, sources)
            fig.committed += len([a for a in child.acks if a.kind != "idx"])
            fig.lost += result.lost
            for p in result.problems:
                fig.note(f"run {k} ({what}): {p}")
            if not result.problems and not result.lost:
                fig.recovered += 1
            shutil.rmtree(data, ignore_errors=True)
    return fig
