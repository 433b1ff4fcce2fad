"""SIGKILL at random moments: the children's write paths, and a real `samchat ask`."""

from __future__ import annotations

import random
import sqlite3
import sys
import time
from pathlib import Path

from fault_campaign.check import check_data
from fault_campaign.figures import Figures
from fault_campaign.process import Ack, Child
from fault_campaign.texts import digest, write_sources
from samchat.errors import IndexCorruptError
from samchat.sam.index import StaticIndex
from samchat.store import Store


def kill_campaign(
    name: str,
    program: str,
    kills: int,
    work: Path,
    rng: random.Random,
    *,
    max_delay: float,
    per_dir: int = 15,
    import_files: int = 0,
) -> Figures:
    """`kills` runs of the child `program`, each killed up to max_delay seconds after its first
    acknowledgement; `per_dir` runs share a data directory (what earlier ones committed stays
    checked), and `import_files` files are written for an import child to read."""
    fig = Figures(name)
    data = work
    acks: list[Ack] = []
    sources: dict[str, str] | None = None
    src = work
    for k in range(kills):
        if k % per_dir == 0:
            data = work / f"{name}-{k}"
            data.mkdir(parents=True)
            acks = []
            if import_files:
                src = data / "src"
                sources = write_sources(src, rng, import_files)
        extra = [str(src)] if import_files else []
        child = Child.program(program, str(data), str(rng.randrange(10**9)), *extra)
        if not child.first.wait(120) or child.proc.poll() is not None:
            # Finished (an import with nothing left) or failed: both show up in the check.
            code_ = child.wait(60)
            if code_ != 0:
                fig.note(f"kill {k}: the child failed: {child.stderr()[-300:]}")
        else:
            time.sleep(rng.uniform(0, max_delay))
            child.kill()
        fig.injected += 1
        acks += child.acks
        result = check_data(data, acks, sources)
        fig.committed = fig.committed + len([a for a in child.acks if a.kind != "idx"])
        fig.lost += result.lost
        for p in result.problems:
            fig.note(f"kill {k}: {p}")
        if not result.problems and not result.lost:
            fig.recovered += 1
    return fig


def _messages(db: Path) -> list[Ack]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return [
            Ack("msg", str(i), digest(c))
            for i, c in conn.execute("SELECT id, content FROM messages")
        ]
    except sqlite3.Error:
        return []
    finally:
        conn.close()


def real_ask_kills(kills: int, work: Path, rng: random.Random) -> Figures:
    """SIGKILL a real `samchat ask` (default model) while it answers; what was committed before
    it started (earlier questions and whole replies) and its question, once saved, must stay."""
    fig = Figures("kill: real `samchat ask` (default model)")
    data = work / "real-ask"
    data.mkdir(parents=True)
    samchat = Path(sys.executable).with_name("samchat")
    for k in range(kills):
        before = _messages(data / "samchat.db")
        child = Child(
            [str(samchat), "ask", f"question {k}: what is a suffix automaton?",
             "--max-new-tokens", "64", "--data-dir", str(data)],
            env={"HF_HUB_OFFLINE": "1"},
        )  # fmt: skip
        deadline = time.monotonic() + 600
        while len(_messages(data / "samchat.db")) <= len(before):  # the question is saved
            if child.proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 4.0))
        child.kill()
        fig.injected += 1
        after = _messages(data / "samchat.db")
        committed = before + [a for a in after if a not in before][:1]  # + its question
        result = check_data(data, committed)
        fig.committed += len(committed) - len(before) + (len(before) if k == 0 else 0)
        fig.lost += result.lost
        for p in result.problems:
            fig.note(f"kill {k}: {p}")
        with Store.open(data / "samchat.db") as store:
            for fp, sep, _model in store.indexes():
                try:
                    StaticIndex.open(data / "index" / fp, fp, sep).close()
                except IndexCorruptError as exc:
                    fig.note(f"kill {k}: the model's index needs a rebuild: {exc}")
        if not result.problems and not result.lost:
            fig.recovered += 1
    fig.committed = len(_messages(data / "samchat.db"))
    return fig
