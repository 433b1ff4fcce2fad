"""SIGKILL during an import or a reply leaves a consistent database and index (subprocesses)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from samchat.corpus.importer import import_paths
from samchat.corpus.indexing import IndexManager
from samchat.store import Store

ROOT = Path(__file__).resolve().parents[2]

PRELUDE = """
import sys, time
from pathlib import Path
from samchat.corpus.indexing import IndexManager
from samchat.store import Store
def encode(text):
    return [b + 1 for b in text.encode()]
data = Path(sys.argv[1])
store = Store.open(data / "samchat.db")
manager = IndexManager(store, "fp", encode, 0, root=data / "index")
manager.open()
"""

IMPORTER = (
    PRELUDE
    + """
from samchat.corpus.importer import import_paths
def on_document(doc_id, tokens):
    manager.add(f"doc:{doc_id}", tokens)
    if doc_id % 7 == 0:
        manager.flush()  # kills also land inside index flushes
import_paths(store, [Path(sys.argv[2])], encode=encode, on_document=on_document)
manager.flush()
"""
)

REPLIER = (
    PRELUDE
    + """
from samchat.chat.record import StoredStats
from samchat.chat.service import ChatService, ReplyRecord
from samchat.decoding.events import ReplyStats
service = ChatService(store)
figures = ReplyStats(tokens=20, seconds=0.02, tokens_per_s=1000.0, steps=20, mat=1.0)
i = 0
while True:  # the store and index writes of `samchat ask`, with a fake streaming delay
    question = f"question {i} about topic {i % 5}"
    pending = service.send(question, chat_id=None, parent_id=None, model="m")
    reply = ""
    for w in range(20):
        reply += f" word{w}"
        time.sleep(0.001)
    record = ReplyRecord(f"answer {i}:" + reply, "stop", StoredStats(figures, "stop"))
    service.finish(pending, record)
    manager.sync()
    i += 1
"""
)


def _spawn(code: str, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _count(db: Path, table: str) -> int:
    if not db.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _kill_when(proc: subprocess.Popen[bytes], db: Path, table: str, at_least: int) -> None:
    deadline = time.monotonic() + 120
    while _count(db, table) < at_least:
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, "the child made no progress"
        time.sleep(0.01)
    time.sleep(random.uniform(0, 0.05))
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def _consistent(data: Path) -> Store:
    store = Store.open(data / "samchat.db")
    assert store.integrity_check() == "ok"
    for fts in ("documents_fts", "messages_fts"):
        store.conn.execute(f"INSERT INTO {fts}({fts}) VALUES ('integrity-check')")
    # The index opens (or rebuilds itself) and one sync makes it hold exactly the store.
    manager = IndexManager(store, "fp", lambda t: [b + 1 for b in t.encode()], 0,
                           root=data / "index")  # fmt: skip
    manager.open()
    assert manager.index.document_ids() == store.index_keys()
    manager.close()
    return store


def test_sigkill_during_import(tmp_path: Path) -> None:
    rng = random.Random(6)
    words = ["suffix", "automaton", "draft", "token", "verify", "tree", "model", "index"]
    src = tmp_path / "src"
    src.mkdir()
    texts = {}
    for i in range(400):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(100, 600))) + f" doc{i}"
        (src / f"f{i:03d}.txt").write_text(text)
        texts[str((src / f"f{i:03d}.txt").resolve())] = text
    data = tmp_path / "data"
    data.mkdir()
    for at_least in (5, 60):
        proc = _spawn(IMPORTER, str(data), str(src))
        _kill_when(proc, data / "samchat.db", "documents", at_least)
        with _consistent(data) as store:
            docs = store.documents()
            assert docs and len(docs) < 400, "the kill should land mid-import"
            for d in docs:  # never a half-written document
                assert store.document_text(d.id) == texts[d.source]
    # Importing again finishes the job without duplicates.
    with Store.open(data / "samchat.db") as store:
        summary = import_paths(store, [src])
        assert len(summary.documents) + len(summary.duplicates) == 400
        assert store.counts()["documents"] == 400
    _consistent(data).close()


def test_sigkill_during_replies(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for at_least in (10, 40):
        proc = _spawn(REPLIER, str(data))
        _kill_when(proc, data / "samchat.db", "messages", at_least)
        with _consistent(data) as store:
            for chat in store.chats():
                thread = store.thread(chat.id)
                # A question is saved before its reply; a reply is whole or absent.
                assert thread[0].role == "user"
                if len(thread) == 2:
                    assert thread[1].content.endswith(" word19")
                    assert (
                        thread[1].parent_id == thread[0].id
                        and thread[1].stats is not None
                        and thread[1].stats.reply.tokens == 20
                    )
                else:
                    assert len(thread) == 1
