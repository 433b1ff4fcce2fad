"""Crash and concurrency safety of the database, with real processes and damaged files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from samchat.cli import main
from samchat.errors import StoreError
from samchat.store import Store, recover

ROOT = Path(__file__).resolve().parents[2]

WRITER = """
import sys
from pathlib import Path
from samchat.store import Store
from samchat.chat.record import StoredStats
from samchat.chat.service import ChatService, ReplyRecord
from samchat.decoding.events import ReplyStats
path, name, n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with Store.open(path) as store:
    for i in range(n):
        service = ChatService(store)
        reply = service.send(f"{name} question {i}", chat_id=None, parent_id=None, model="m")
        figures = ReplyStats(tokens=i, seconds=0.0, tokens_per_s=0.0, steps=i, mat=1.0)
        record = ReplyRecord(f"{name} answer {i}", "stop", StoredStats(figures, "stop"))
        service.finish(reply, record)
"""


def _python(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_two_processes_write_one_database(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    n = 60
    # Both start on a missing file: they race on creation and on the migrations too.
    procs = [_python(WRITER, str(path), name, str(n)) for name in ("alpha", "beta")]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()
    with Store.open(path) as store:
        assert store.integrity_check() == "ok"
        assert store.counts() == {"chats": 2 * n, "messages": 4 * n, "documents": 0}
        for chat in store.chats():
            thread = store.thread(chat.id)
            assert [m.role for m in thread] == ["user", "assistant"]
            assert thread[1].content == thread[0].content.replace("question", "answer")
        assert len(store.search("alpha answer", limit=1000)) == n


def _corrupt(path: Path) -> None:
    with Store.open(path) as store:
        chat = store.create_chat("precious")
        store.add_message(chat, "user", "keep me", None)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path.write_bytes(b"this is not a database at all" * 100)


def test_corrupt_database_gives_clear_error_and_recovery(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    _corrupt(path)
    with pytest.raises(StoreError, match=r"corrupt.*samchat db recover"):
        Store.open(path)
    result = recover(path)
    assert result.moved_to.exists() and result.moved_to.name.startswith("samchat.db.corrupt-")
    assert result.moved_to.read_bytes().startswith(b"this is not")  # nothing was deleted
    with Store.open(path) as store:
        assert store.counts()["chats"] == 0


def test_recover_salvages_readable_rows(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    with Store.open(path) as store:
        chat = store.create_chat("kept chat")
        store.add_message(chat, "user", "kept message", None)
        store.add_document("/d", "D", "kept document", "text")
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    result = recover(path)
    assert result.salvaged == {"chats": 1, "messages": 1, "documents": 1}
    with Store.open(path) as store:
        assert [h.kind for h in store.search("kept")] != []
        assert store.thread(1)[0].content == "kept message"


def test_cli_reports_corrupt_database_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _corrupt(tmp_path / "samchat.db")
    assert main(["history", "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "recover" in err
    assert main(["db", "recover", "--data-dir", str(tmp_path)]) == 0
    assert main(["db", "check", "--data-dir", str(tmp_path)]) == 0
    assert list(tmp_path.glob("samchat.db.corrupt-*"))
