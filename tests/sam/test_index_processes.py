"""One static index directory shared by several instances and processes: the file lock,
refresh(), serials, removals, merges done elsewhere, and the real CLI (import while asking)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

import samchat.sam.index_files as index_files_module
from samchat.sam.index import LOCK_FILE, MAX_SEGMENTS, StaticIndex

ROOT = Path(__file__).resolve().parents[2]
SEP = 0
FP = "tokenizer-a"


def tokens(doc_id: str, n: int = 60) -> list[int]:
    """A document's tokens, the same in every process (str seeds hash with sha512)."""
    rng = random.Random(doc_id)
    return [rng.randrange(1, 30_000) for _ in range(n)]


def drafts_from(index: StaticIndex, toks: list[int], cut: int = 12, n: int = 8) -> bool:
    cur = index.cursor()
    cur.feed_many(toks[:cut])
    return cur.draft(n) == toks[cut : cut + n]


def check_directory(directory: Path, index: StaticIndex) -> dict[str, Any]:
    """No orphan or lock files, and a manifest consistent with its segments."""
    manifest: dict[str, Any] = json.loads((directory / "manifest.json").read_text())
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        ["manifest.json", *manifest["segments"]]
    )
    assert manifest["segments"] == [s.name for s in index.segments]
    serials = [d.serial for s in index.segments for d in s.docs]
    assert len(serials) == len(set(serials)), "a serial was handed out twice"
    assert set(manifest["removed"]) <= set(serials)
    assert all(s < manifest["next_serial"] for s in serials)
    assert all(int(n[4:-4]) < manifest["next_segment"] for n in manifest["segments"])
    return manifest


def live_copies(index: StaticIndex, doc_id: str) -> list[int]:
    return [
        d.serial
        for s in index.segments
        for d in s.docs
        if d.doc_id == doc_id and d.serial not in index.removed
    ]


class Opened:
    """Opens indexes like StaticIndex.open/recreate and closes them all after the test."""

    def __init__(self) -> None:
        self.all: list[StaticIndex] = []

    def __call__(self, directory: Path) -> StaticIndex:
        self.all.append(StaticIndex.open(directory, FP, SEP))
        return self.all[-1]

    def recreate(self, directory: Path) -> StaticIndex:
        self.all.append(StaticIndex.recreate(directory, FP, SEP))
        return self.all[-1]


@pytest.fixture
def opened() -> Iterator[Opened]:
    o = Opened()
    yield o
    for index in o.all:
        index.close()


# -- two instances in one process (each behaves like a process of its own) ------------------


def test_refresh_sees_other_writers_and_is_cheap(
    opened: Opened, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = opened(tmp_path)
    b = opened(tmp_path)
    assert b.refresh() is False
    a.add_document("x", tokens("x"))
    assert b.refresh() is False  # not flushed: nothing on disk
    a.flush()
    assert b.refresh() is True
    assert b.document_ids() == {"x"} and drafts_from(b, tokens("x"))
    reads: list[Path] = []
    real = index_files_module.read_manifest

    def counting(directory: Path, fingerprint: str, separator: int) -> Any:
        reads.append(directory)
        return real(directory, fingerprint, separator)

    monkeypatch.setattr(index_files_module, "read_manifest", counting)
    assert b.refresh() is False
    assert reads == []  # unchanged: one stat, no read
    assert not (tmp_path / LOCK_FILE).exists()


def test_tail_serials_never_collide(opened: Opened, tmp_path: Path) -> None:
    a = opened(tmp_path)
    b = opened(tmp_path)
    a.add_document("x", tokens("x"))
    b.add_document("y", tokens("y"))  # same serial as x, for now
    a.flush()
    assert b.refresh() is True  # b renumbers its tail
    assert b.document_ids() == {"x", "y"}
    b.remove_document("y")  # must not hit x
    b.add_document("y", tokens("y", 50))
    b.flush()
    fresh = opened(tmp_path)
    check_directory(tmp_path, fresh)
    assert fresh.document_ids() == {"x", "y"}
    assert drafts_from(fresh, tokens("x")) and drafts_from(fresh, tokens("y", 50))
    fresh.remove_document("x")
    assert opened(tmp_path).document_ids() == {"y"}


def test_removals_from_stale_processes_merge(opened: Opened, tmp_path: Path) -> None:
    a = opened(tmp_path)
    for k in ("p", "q", "r"):
        a.add_document(k, tokens(k))
    a.flush()
    b = opened(tmp_path)
    a.remove_document("p")
    b.remove_document("q")  # b has not seen p's removal: both must stay removed
    b.add_document("s", tokens("s"))
    b.flush()
    a.add_document("t", tokens("t"))
    a.flush()
    fresh = opened(tmp_path)
    check_directory(tmp_path, fresh)
    assert fresh.document_ids() == {"r", "s", "t"}
    assert not drafts_from(fresh, tokens("p")) and not drafts_from(fresh, tokens("q"))
    assert b.refresh() is True
    assert a.document_ids() == b.document_ids() == {"r", "s", "t"}
    fresh.compact()
    assert b.refresh() and b.document_ids() == {"r", "s", "t"} and not b.removed


def test_last_flush_of_a_document_wins(opened: Opened, tmp_path: Path) -> None:
    a = opened(tmp_path)
    b = opened(tmp_path)
    a.add_document("x", tokens("x"))
    b.add_document("x", tokens("x2"))
    a.flush()
    b.flush()
    fresh = opened(tmp_path)
    assert len(live_copies(fresh, "x")) == 1
    assert drafts_from(fresh, tokens("x2")) and not drafts_from(fresh, tokens("x"))


def test_merges_elsewhere_release_maps_and_keep_warm_segments(
    opened: Opened, tmp_path: Path
) -> None:
    a = opened(tmp_path)
    for k in ("a1", "a2", "a3"):
        a.add_document(k, tokens(k))
        a.flush()
    b = opened(tmp_path)
    b.warm()
    old_cursor = b.cursor()
    a.add_document("a4", tokens("a4"))
    a.flush()
    assert b.refresh()
    assert [s.views is None for s in b.segments] == [True, True, True, False]
    old_segments = list(b.segments)
    a.compact()  # deletes the files b maps or copied
    assert b.refresh()
    assert len(b.segments) == 1 and b.segments[0] not in old_segments
    assert all(s.views is None and s.mapping is None for s in old_segments)  # released
    for k in ("a1", "a2", "a3", "a4"):
        assert drafts_from(b, tokens(k))
    old_cursor.feed_many(tokens("a2")[:12])  # older cursors stay valid
    assert old_cursor.draft(8) == tokens("a2")[12:20]
    check_directory(tmp_path, b)


def test_many_flushes_from_two_instances(opened: Opened, tmp_path: Path) -> None:
    a = opened(tmp_path)
    b = opened(tmp_path)
    for i in range(3 * MAX_SEGMENTS):
        for w, idx in (("a", a), ("b", b)):
            idx.add_document(f"{w}{i}", tokens(f"{w}{i}"))
            idx.flush()
    fresh = opened(tmp_path)
    check_directory(tmp_path, fresh)
    want = {f"{w}{i}" for w in "ab" for i in range(3 * MAX_SEGMENTS)}
    assert fresh.document_ids() == want
    assert all(drafts_from(fresh, tokens(k)) for k in want)
    assert fresh.stats()["segments"] <= MAX_SEGMENTS


def test_recreate_elsewhere(opened: Opened, tmp_path: Path) -> None:
    a = opened(tmp_path)
    a.add_document("old", tokens("old"))
    a.flush()
    old_names = {s.name for s in a.segments}
    b = opened(tmp_path)
    b.add_document("t", tokens("t"))
    opened.recreate(tmp_path)
    assert b.refresh() is True
    assert b.document_ids() == {"t"}  # its unflushed tail survives
    b.flush()
    assert not old_names & {s.name for s in b.segments}  # names are never reused
    fresh = opened(tmp_path)
    assert fresh.document_ids() == {"t"} and drafts_from(fresh, tokens("t"))
    check_directory(tmp_path, fresh)


def test_manifest_of_older_samchat_without_uid(opened: Opened, tmp_path: Path) -> None:
    a = opened(tmp_path)
    a.add_document("x", tokens("x"))
    a.flush()
    path = tmp_path / "manifest.json"
    data = json.loads(path.read_text())
    del data["uid"]
    path.write_text(json.dumps(data))
    b = opened(tmp_path)
    assert b.document_ids() == {"x"}
    b.add_document("y", tokens("y"))
    b.flush()
    assert json.loads(path.read_text())["uid"]
    assert a.refresh() and a.document_ids() == {"x", "y"}


def test_writers_wait_for_the_lock(opened: Opened, tmp_path: Path) -> None:
    a = opened(tmp_path)
    a.add_document("x", tokens("x"))
    done = threading.Event()

    def flush() -> None:
        a.flush()
        done.set()

    with FileLock(tmp_path / LOCK_FILE):  # as another process would hold it
        worker = threading.Thread(target=flush)
        worker.start()
        assert not done.wait(0.5)
        assert not list(tmp_path.glob("*.sam"))
    worker.join(30)
    assert done.is_set()
    assert opened(tmp_path).document_ids() == {"x"}
    assert not (tmp_path / LOCK_FILE).exists()


# -- two real processes -----------------------------------------------------------------------

WORKER = r"""
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[5])
from test_index_processes import tokens
from samchat.sam.index import StaticIndex

directory, prefix, n, per_flush = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
(directory.parent / f"ready-{prefix}").touch()
deadline = time.monotonic() + 60
while len(list(directory.parent.glob("ready-*"))) < 2 and time.monotonic() < deadline:
    time.sleep(0.005)
index = StaticIndex.open(directory, "tokenizer-a", 0)
removed = set()
for i in range(n):
    index.add_document(f"{prefix}{i}", tokens(f"{prefix}{i}"))
    if i % per_flush == per_flush - 1:
        index.flush()
    if i % 7 == 3:
        index.remove_document(f"{prefix}{i - 2}")
        removed.add(f"{prefix}{i - 2}")
    if prefix == "b" and i == n // 2:
        index.compact()
index.flush()
index.refresh()
mine = {f"{prefix}{i}" for i in range(n)} - removed
lost = sorted(mine - index.document_ids())
index.close()
if lost:
    sys.exit(f"{prefix}: lost {lost}")
"""


def expected_docs(prefix: str, n: int) -> set[str]:
    return {f"{prefix}{i}" for i in range(n)} - {f"{prefix}{i - 2}" for i in range(n) if i % 7 == 3}


def run_workers(directory: Path, n: int, per_flush: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    here = str(Path(__file__).parent)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(directory), prefix, str(n), str(per_flush), here],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for prefix in ("a", "b")
    ]
    try:
        for p in procs:
            _, err = p.communicate(timeout=180)
            assert p.returncode == 0, err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_processes_flush_and_merge_concurrently(opened: Opened, tmp_path: Path) -> None:
    directory = tmp_path / "ix"
    n = 8 * MAX_SEGMENTS
    setup = opened(directory)
    setup.add_document("base", tokens("base"))
    setup.flush()
    reader = opened(directory)  # mapped, like `samchat ask`
    warm = opened(directory)  # copied, like the TUI
    warm.warm()
    before = [reader.cursor(), warm.cursor()]

    run_workers(directory, n, per_flush=1)

    want = {"base"} | expected_docs("a", n) | expected_docs("b", n)
    fresh = opened(directory)
    check_directory(directory, fresh)
    assert fresh.document_ids() == want
    assert all(len(live_copies(fresh, k)) == 1 for k in want)
    gone = {f"{p}{i}" for p in "ab" for i in range(n)} - want
    for k in want:
        assert drafts_from(fresh, tokens(k)), k
    for k in gone:
        assert not drafts_from(fresh, tokens(k)), k
    for index, cur in zip((reader, warm), before, strict=True):
        assert index.refresh() is True
        assert index.refresh() is False
        assert index.document_ids() == want
        assert all(drafts_from(index, tokens(k)) for k in want)
        cur.feed_many(tokens("base")[:12])  # made before: still valid
        assert cur.draft(8) == tokens("base")[12:20]


# -- the real CLI: `samchat import` while `samchat ask` runs -------------------------------------


def _samchat() -> list[str]:
    script = shutil.which("samchat", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "samchat"]


def _wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if text in path.read_text(errors="replace"):
            return
        time.sleep(0.1)


@pytest.mark.model
def test_import_while_asking(tmp_path: Path, default_lm: Any) -> None:
    from samchat.corpus.indexing import tokenizer_codec
    from samchat.paths import data_dir
    from samchat.store import Store

    rng = random.Random(3)
    folder = tmp_path / "docs"
    folder.mkdir()
    n_files = 40
    letters = "abcdefghijklmnopqrstuvwxyz"
    for i in range(n_files):
        words = (
            "".join(rng.choice(letters) for _ in range(rng.randrange(3, 9))) for _ in range(80)
        )
        (folder / f"note{i:02d}.txt").write_text(f"Note {i}: " + " ".join(words) + ".\n")

    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # SAMCHAT_*_DIR: this test's own (conftest)
    logs = {name: (tmp_path / f"{name}.out", tmp_path / f"{name}.err") for name in ("ask", "imp")}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, *args: str) -> None:
        out, err = logs[name]
        with open(out, "wb") as o, open(err, "wb") as e:
            procs[name] = subprocess.Popen([*_samchat(), *args], env=env, stdout=o, stderr=e)

    try:
        start("ask", "ask", "--max-new-tokens", "8", "hi")
        # Import while ask holds the index open: after its model loaded, before its reply.
        _wait_for(logs["ask"][1], "[model ready]", procs["ask"], timeout=240)
        start("imp", "import", str(folder))
        for name, proc in procs.items():
            proc.wait(timeout=400)
            assert proc.returncode == 0, (name, logs[name][1].read_text()[-3000:])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert logs["ask"][0].read_text().strip()
    assert f"imported {n_files} documents" in logs["imp"][1].read_text()

    encode, separator = tokenizer_codec(default_lm.tokenizer)
    fingerprint = default_lm.fingerprint
    with Store.open(data_dir() / "samchat.db") as store:
        assert len(store.documents()) == n_files
        (chat,) = store.chats()
        messages = store.messages(chat.id)
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[0].content == "hi" and messages[1].content.strip()
        keys = store.index_keys()
        assert len(keys) == n_files + 2
        assert (fingerprint, separator) in {(f, s) for f, s, _ in store.indexes()}
        texts = {k: store.text_for_key(k) or "" for k in keys if k.startswith("doc:")}
    directory = data_dir() / "index" / fingerprint
    index = StaticIndex.open(directory, fingerprint, separator)
    try:
        check_directory(directory, index)
        assert index.document_ids() == keys
        assert all(len(live_copies(index, k)) == 1 for k in keys)
        for text in texts.values():
            assert drafts_from(index, encode(text), cut=16, n=6)
    finally:
        index.close()
