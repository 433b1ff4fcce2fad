"""Fault-injection campaign: kills, corruption, a full disk and concurrent writers, in figures.

    python scripts/faults.py --kills 240 --corruptions 240 --real-asks 5 --markdown

Every scenario counts the faults it injected and the committed rows it lost (must be 0). A row
is committed once the process that wrote it said so: the child processes print `ack KIND ID
HASH` after each commit, the campaign records every line it read before the kill, and after the
kill checks each one is in the database with the same text. Corruptions are checked for
detection (opening and reading everything through samchat, then `samchat db check`) and for
what `samchat db recover` saves. See docs/reliability.md for the figures and what they mean.

A script, not part of the package: the default test run exercises it in a small version
(tests/store/test_faults_smoke.py); `make faults` runs the full campaign.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import resource
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from samchat.corpus.indexing import IndexManager  # noqa: E402
from samchat.errors import IndexCorruptError, SamchatError  # noqa: E402
from samchat.figures import StoredStats  # noqa: E402
from samchat.sam.index import StaticIndex  # noqa: E402
from samchat.store import Store, deep_check, recover  # noqa: E402

WORDS = ("suffix", "automaton", "draft", "token", "verify", "tree", "model", "index")
FP = "fp"  # the fake tokenizer's fingerprint: bytes + 1, separator 0


def encode(text: str) -> list[int]:
    return [b + 1 for b in text.encode()]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -- child processes: the real write paths, acknowledging each commit on stdout ---------------

PRELUDE = """
import hashlib, random, sys, time
from pathlib import Path
from samchat.corpus.indexing import IndexManager
from samchat.store import Store
def encode(text):
    return [b + 1 for b in text.encode()]
def ack(kind, key, text):
    print("ack", kind, key, hashlib.sha256(text.encode()).hexdigest()[:16], flush=True)
data, seed = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
WORDS = "suffix automaton draft token verify tree model index".split()
"""

OPEN = """
store = Store.open(data / "samchat.db")
manager = IndexManager(store, "fp", encode, 0, root=data / "index")
manager.open()
"""

# `samchat import`'s path: import_paths, each document added to the index as it commits.
IMPORTER = (
    PRELUDE
    + OPEN
    + """
from samchat.corpus.importer import import_paths
n = 0
def on_document(doc_id, tokens):
    global n
    ack("doc", doc_id, store.document_text(doc_id))
    manager.add(f"doc:{doc_id}", tokens)
    n += 1
    if n % 5 == 0:
        manager.flush()
import_paths(store, [Path(sys.argv[3])], encode=encode, on_document=on_document)
manager.flush()
"""
)

# `samchat ask`'s path: the chat service's send / finish, then the index sync, with a fake stream.
ASKER = (
    PRELUDE
    + OPEN
    + """
from samchat.chat.record import StoredStats
from samchat.chat.service import ChatService, ReplyRecord
from samchat.decoding.events import ReplyStats
service = ChatService(store)
limit = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
size = int(sys.argv[4]) if len(sys.argv) > 4 else 20
for i in range(limit):
    question = f"question {seed}.{i} about " + " ".join(rng.choice(WORDS) for _ in range(12))
    pending = service.send(question, chat_id=None, parent_id=None, model="m")
    ack("msg", pending.parent_id, question)
    reply = f"answer {seed}.{i}:"
    for w in range(size):
        reply += " " + rng.choice(WORDS)
        if w % 20 == 0:
            time.sleep(0.001)
    figures = ReplyStats(tokens=size, seconds=0.02, tokens_per_s=size / 0.02, steps=size, mat=1.0)
    record = ReplyRecord(reply, "stop", StoredStats(figures, "stop"))
    reply_id = service.finish(pending, record)
    ack("msg", reply_id, reply)
    manager.sync()
"""
)

# The TUI's path: the store's add_message, record.save_reply and the BackgroundIndexer.
TUI = (
    PRELUDE
    + """
from samchat.chat.record import StoredStats, save_reply
from samchat.corpus.indexing import BackgroundIndexer
from samchat.decoding.events import ReplyStats
from samchat.store import Store
limit = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
chat_data = Store.open(data / "samchat.db")
indexer = BackgroundIndexer(data / "samchat.db", "fp", encode, 0, root=data / "index").start()
chat = chat_data.create_chat(f"tui chat {seed}", "m")
parent = None
for i in range(limit):
    question = f"tui question {seed}.{i} " + " ".join(rng.choice(WORDS) for _ in range(12))
    user_id = chat_data.add_message(chat, "user", question, parent)
    ack("msg", user_id, question)
    reply = f"tui answer {seed}.{i}:" + "".join(" " + rng.choice(WORDS) for _ in range(40))
    time.sleep(0.005)
    figures = ReplyStats(tokens=40, seconds=0.02, tokens_per_s=2000.0, steps=40, mat=1.0)
    stats = StoredStats(figures, "stop")
    parent = save_reply(
        chat_data, chat, user_id, reply, model="m", stats=stats, finish_reason="stop"
    )
    ack("msg", parent, reply)
    indexer.poke()
indexer.wait_idle(60)
indexer.stop()
"""
)

# Index flushes and compactions: documents added to the store, then flushed and merged.
INDEXER = (
    PRELUDE
    + OPEN
    + """
i = 0
while True:
    words = rng.randint(500, 4000)
    text = f"generated {seed}.{i} " + " ".join(rng.choice(WORDS) for _ in range(words))
    doc_id = store.add_document(f"/generated/{seed}/{i}", f"G{i}", text, "text")
    ack("doc", doc_id, text)
    manager.add(f"doc:{doc_id}", encode(text))
    if i % 2 == 1:
        manager.flush()
        for key in manager.index.document_ids():
            print("ack idx", key, "-", flush=True)
    if i % 6 == 5:
        manager.compact()
    i += 1
"""
)


@dataclass
class Ack:
    kind: str  # doc | msg | idx
    key: str
    hash: str


class Child:
    """A child process whose acknowledgements are read as they come."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, **kw: Any) -> None:
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            argv,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            stdin=subprocess.DEVNULL,  # `samchat ask` would add piped stdin to its question
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kw,
        )
        self.acks: list[Ack] = []
        self.stdout: list[str] = []
        self.first = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def python(cls, code: str, *args: str, **kw: Any) -> Child:
        return cls([sys.executable, "-c", code, *args], **kw)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            parts = line.split()
            if len(parts) == 4 and parts[0] == "ack":
                self.acks.append(Ack(parts[1], parts[2], parts[3]))
                self.first.set()
            else:
                self.stdout.append(line)
        self.first.set()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.wait()

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)  # what the child wrote before it died is still in the pipe
        return code

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")


# -- checking a data directory after a fault --------------------------------------------------


@dataclass
class Check:
    lost: int = 0  # acknowledged rows missing or different
    problems: list[str] = field(default_factory=list)
    index_rebuilt: bool = False


def check_data(data: Path, acks: list[Ack], sources: dict[str, str] | None = None) -> Check:
    """Everything acknowledged is there, unchanged; the database passes every check, opens with
    samchat; documents are whole; replies hang under their question; the static index opens
    without a rebuild and one sync makes it hold exactly the store."""
    out = Check()
    db = data / "samchat.db"
    try:
        store = Store.open(db)
    except SamchatError as exc:
        out.problems.append(f"store does not open: {exc}")
        out.lost = len([a for a in acks if a.kind != "idx"])
        return out
    with store:
        verdict = deep_check(store.conn)
        if verdict != "ok":
            out.problems.append(f"check: {verdict}")
        conn = store.conn
        flushed: set[str] = set()
        for a in acks:
            if a.kind == "idx":
                flushed.add(a.key)
                continue
            sql = {
                "doc": "SELECT text FROM documents WHERE id = ?",
                "msg": "SELECT content FROM messages WHERE id = ?",
            }[a.kind]
            row = conn.execute(sql, (int(a.key),)).fetchone()
            if row is None or digest(str(row[0])) != a.hash:
                out.lost += 1
        for doc_id, text, stored_hash, source in conn.execute(
            "SELECT id, text, content_hash, source FROM documents"
        ):
            whole = hashlib.sha256(text.encode()).hexdigest() == stored_hash
            if not whole or (sources is not None and sources.get(source, text) != text):
                out.problems.append(f"document {doc_id} is not whole")
        orphans = conn.execute(
            "SELECT COUNT(*) FROM messages a LEFT JOIN messages q ON q.id = a.parent_id"
            " WHERE a.role = 'assistant' AND (q.id IS NULL OR q.role != 'user')"
        ).fetchone()[0]
        if orphans:
            out.problems.append(f"{orphans} replies without their question")
        directory = data / "index" / FP
        if directory.exists():
            try:
                static = StaticIndex.open(directory, FP, 0)
            except IndexCorruptError as exc:
                out.index_rebuilt = True
                out.problems.append(f"index needs a rebuild: {exc}")
            else:
                missing = flushed - static.document_ids()
                if missing:
                    out.problems.append(f"{len(missing)} flushed index entries lost")
                static.close()
            manager = IndexManager(store, FP, encode, 0, root=data / "index")
            manager.open()
            if manager.index.document_ids() != store.index_keys():
                out.problems.append("the index does not match the store after a sync")
            manager.close()
    return out


@dataclass
class Figures:
    scenario: str
    injected: int = 0
    detected: int = 0  # corruptions: noticed by samchat before any damaged data was used
    harmless: int = 0  # corruptions that changed no stored data (free space, padding)
    silent: int = 0  # corruptions that changed data without being noticed
    recovered: int = 0  # faults after which everything was usable again
    committed: int = 0  # rows acknowledged before the faults (kills, full disk, writers)
    lost: int = 0  # committed rows missing afterwards
    rows_before: int = 0  # corruptions: rows in the database before
    rows_saved: int = 0  # corruptions: rows `db recover` saved unchanged
    rows_altered: int = 0  # corruptions: rows saved with different content
    over_page_bound: int = 0  # leaf or overflow page damaged: more lost than the page held
    unbounded: int = 0  # recoveries after damage to an interior or schema page (no bound)
    unclean: int = 0  # detected as an unexpected error rather than a one-line one
    problems: list[str] = field(default_factory=list)
    notes: str = ""

    def note(self, problem: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(problem)


# -- kills ------------------------------------------------------------------------------------


def _sources(src: Path, rng: random.Random, n: int) -> dict[str, str]:
    src.mkdir(parents=True, exist_ok=True)
    texts = {}
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(300, 3000)))
        path = src / f"f{i:03d}.txt"
        text = f"{words} file {i} of {src.name}"
        path.write_text(text)
        texts[str(path.resolve())] = text
    return texts


def kill_campaign(
    name: str,
    code: str,
    kills: int,
    work: Path,
    rng: random.Random,
    *,
    max_delay: float,
    per_dir: int = 15,
    import_files: int = 0,
) -> Figures:
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
                sources = _sources(src, rng, import_files)
        extra = [str(src)] if import_files else []
        child = Child.python(code, str(data), str(rng.randrange(10**9)), *extra)
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


# -- corruption -------------------------------------------------------------------------------


def build_base(base: Path, rng: random.Random) -> None:
    """A database with documents (some span overflow pages), chats with branches, and a static
    index of several segments."""
    base.mkdir(parents=True)
    with Store.open(base / "samchat.db") as store:
        manager = IndexManager(store, FP, encode, 0, root=base / "index")
        manager.open()
        for i in range(14):
            size = rng.choice((50, 400, 2500))
            text = f"document {i} " + " ".join(rng.choice(WORDS) for _ in range(size))
            doc_id = store.add_document(f"/src/d{i}.txt", f"D{i}", text, "text")
            manager.add(f"doc:{doc_id}", encode(text))
            if i % 5 == 4:
                manager.flush()  # several segments
        for c in range(4):
            chat = store.create_chat(f"chat {c}", "m")
            parent = None
            for t in range(60):
                q = store.add_message(chat, "user", f"question {c}.{t} " * 6, parent)
                parent = store.add_message(
                    chat,
                    "assistant",
                    f"answer {c}.{t} " * 10,
                    q,
                    stats=StoredStats.parse({"tokens": t}),
                )
                if t % 15 == 14:
                    store.add_message(chat, "assistant", f"another answer {c}.{t}", q)
            manager.sync()
        manager.close()
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def dump(db: Path) -> dict[str, dict[int, tuple[Any, ...]]] | None:
    """Every row of the user tables, or None if the file cannot be read whole."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    conn.text_factory = lambda raw: raw.decode("utf-8", "replace")
    try:
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN"
                " ('chats', 'messages', 'documents', 'passages', 'indexes')"
            )
        ]
        return {
            t: {int(r[0]): tuple(r[1:]) for r in conn.execute(f"SELECT rowid, * FROM {t}")}
            for t in tables
        }
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def page_map(db: Path) -> dict[int, tuple[str, str, int]]:
    """page -> (b-tree name, page type, rows on it), from SQLite's dbstat table when present."""
    conn = sqlite3.connect(db)
    try:
        return {
            int(p): (str(n), str(t), int(c))
            for n, p, t, c in conn.execute("SELECT name, pageno, pagetype, ncell FROM dbstat")
        }
    except sqlite3.Error:
        return {}
    finally:
        conn.close()


def detect(db: Path) -> str | None:
    """How samchat notices the damage: opening and reading everything through the Store, or
    `samchat db check`; None if it does not."""
    try:
        with Store.open(db) as store:
            store.counts()
            for chat in store.chats():
                store.messages(chat.id)
            for key in store.index_keys():
                store.text_for_key(key)
            store.indexes()
            try:
                verdict = deep_check(store.conn)
            except sqlite3.Error as exc:
                return f"check: {exc}"
            return None if verdict == "ok" else "check"
    except SamchatError:
        return "read"
    except Exception as exc:  # a damaged value samchat trips over: noticed, but not cleanly
        return f"crash: {type(exc).__name__}"


def _children(db: Path) -> list[tuple[str, int, str]]:
    """(table, column position in `SELECT *`, parent table) of every NOT NULL foreign key."""
    conn = sqlite3.connect(db)
    try:
        out = []
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            cols = {r[1]: (r[0], bool(r[3])) for r in conn.execute(f"PRAGMA table_info({table})")}
            for fk in conn.execute(f"PRAGMA foreign_key_list({table})"):
                position, notnull = cols[fk[3]]
                if notnull and fk[2] != table:
                    out.append((str(table), int(position), str(fk[2])))
        return out
    finally:
        conn.close()


def db_corruption(trials: int, work: Path, base: Path, rng: random.Random) -> list[Figures]:
    """Random bytes (1-64) written at a random place of a random page (3 in 4 trials), or the
    file truncated at a random length; each detected one is recovered and compared."""
    flips = Figures("corruption: database pages, random bytes")
    cuts = Figures("corruption: database file, truncated")
    before = dump(base / "samchat.db")
    assert before is not None
    pages = page_map(base / "samchat.db")
    children = _children(base / "samchat.db")
    size = (base / "samchat.db").stat().st_size
    total = sum(len(rows) for rows in before.values())
    for k in range(trials):
        try:
            _db_trial(k, work, base, rng, flips, cuts, before, pages, children, size, total)
        except Exception as exc:  # a failure of the campaign or of samchat: counted, not fatal
            fig = cuts if "truncat" in str(exc) else flips
            fig.note(f"trial {k}: {type(exc).__name__}: {exc}")
        shutil.rmtree(work / f"db-corrupt-{k}", ignore_errors=True)
    return [flips, cuts]


def _db_trial(
    k: int,
    work: Path,
    base: Path,
    rng: random.Random,
    flips: Figures,
    cuts: Figures,
    before: dict[str, dict[int, tuple[Any, ...]]],
    pages: dict[int, tuple[str, str, int]],
    children: list[tuple[str, int, str]],
    size: int,
    total: int,
) -> None:
    page_size = 4096
    trial = work / f"db-corrupt-{k}"
    trial.mkdir(parents=True)
    db = trial / "samchat.db"
    shutil.copy(base / "samchat.db", db)
    data = bytearray(db.read_bytes())
    damaged: list[int]
    if rng.random() < 0.25:
        fig = cuts
        cut = rng.randrange(1, size)
        del data[cut:]
        damaged = list(range(cut // page_size + 1, size // page_size + 1))
    else:
        fig = flips
        page = rng.randrange(1, size // page_size + 1)
        n = rng.randint(1, 64)
        at = (page - 1) * page_size + rng.randrange(0, page_size - n)
        data[at : at + n] = bytes(rng.randrange(256) for _ in range(n))
        damaged = [page]
    db.write_bytes(bytes(data))
    fig.injected += 1
    seen = detect(db)
    after = dump(db)
    if seen is None:
        if after == before:
            fig.harmless += 1
        else:
            fig.silent += 1
            fig.note(f"trial {k}: pages {damaged[:3]} changed without being detected")
        return
    fig.detected += 1
    if seen.startswith("crash"):
        fig.unclean += 1
        fig.note(f"trial {k}: pages {damaged[:3]}: samchat tripped over a damaged value ({seen})")
    recover(db, trial / "index")
    saved = dump(db)
    again = detect(db)
    if saved is None or again is not None:
        fig.note(f"trial {k}: the recovered database is not usable ({again})")
        return
    fig.recovered += 1
    fig.rows_before += total
    lost_ids: dict[str, set[int]] = {}
    for table, rows in before.items():
        got = saved.get(table, {})
        same = {i for i, r in rows.items() if got.get(i) == r}
        # A reply whose question was lost is kept as a root: the same row, unparented.
        if table == "messages":
            same |= {
                i
                for i, r in rows.items()
                if i in got and got[i][2] is None and got[i][:2] + got[i][3:] == r[:2] + r[3:]
            }
        fig.rows_saved += len(same)
        fig.rows_altered += len([i for i in rows if i in got and i not in same])
        lost_ids[table] = set(rows) - same
    bound = _page_bound(pages, damaged)
    if bound is None:
        fig.unbounded += 1
        return
    for table, lost in lost_ids.items():
        # Rows that belong to a lost row (a passage of a lost document) go with it.
        for child, position, parent in children:
            if child == table:
                lost = {
                    i for i in lost if before[table][i][position] not in lost_ids.get(parent, ())
                }
        if len(lost) > bound.get(table, 0):
            fig.over_page_bound += 1
            fig.note(f"trial {k}: {table} lost {len(lost)}, pages {damaged[:3]} held {bound}")
            break


def _page_bound(
    pages: dict[int, tuple[str, str, int]], damaged: list[int]
) -> dict[str, int] | None:
    """Rows each table may lose when `damaged` pages are unreadable: the rows on its damaged
    leaf pages plus one per damaged overflow page; None when an interior page or page 1 (the
    schema) is among them, which can hide whole subtrees."""
    bound: dict[str, int] = {}
    for page in damaged:
        name, kind, cells = pages.get(page, ("", "free", 0))
        if page == 1 or kind == "internal" or name in ("sqlite_schema", "sqlite_master"):
            return None
        if kind == "leaf":
            bound[name] = bound.get(name, 0) + cells
        elif kind == "overflow":
            bound[name] = bound.get(name, 0) + 1
    return bound


_PREFIX = struct.Struct("<8sIII")


def _covered(path: Path) -> list[tuple[int, int]]:
    """Byte ranges of a segment file that its checksums cover: header and arrays."""
    raw = path.read_bytes()
    _magic, _version, hlen, _crc = _PREFIX.unpack_from(raw, 0)
    header = json.loads(raw[_PREFIX.size : _PREFIX.size + hlen])
    spans = [(0, _PREFIX.size + hlen)]
    width = {"i32": 4, "u16": 2}
    for e in header["arrays"]:
        spans.append((int(e["offset"]), int(e["offset"]) + width[e["type"]] * int(e["count"])))
    return spans


def index_corruption(trials: int, work: Path, base: Path, rng: random.Random) -> Figures:
    fig = Figures("corruption: static index segments (random bytes 75%, truncation 25%)")
    segments = sorted((base / "index" / FP).glob("seg-*.sam"))
    covered = {s.name: _covered(s) for s in segments}
    db = work / "index-db" / "samchat.db"
    db.parent.mkdir(parents=True)
    shutil.copy(base / "samchat.db", db)
    with Store.open(db) as store:
        want = store.index_keys()
        for k in range(trials):
            root = work / f"index-corrupt-{k}"
            shutil.copytree(base / "index", root)
            seg = root / FP / rng.choice(segments).name
            data = bytearray(seg.read_bytes())
            if rng.random() < 0.25:
                start, end = rng.randrange(0, len(data)), len(data)
                del data[start:]
            else:
                n = rng.randint(1, 64)
                start = rng.randrange(0, len(data) - n)
                end = start + n
                old = bytes(data[start:end])
                new = bytes(rng.randrange(256) for _ in range(n))
                data[start:end] = new
                if new == old:
                    end = start  # nothing changed
            seg.write_bytes(bytes(data))
            fig.injected += 1
            try:
                StaticIndex.open(root / FP, FP, 0).close()
            except IndexCorruptError:
                fig.detected += 1
            else:
                hit = any(a < end and start < b for a, b in covered[seg.name])
                if hit:
                    fig.silent += 1
                    fig.note(f"trial {k}: bytes {start}-{end} of {seg.name} not detected")
                else:
                    fig.harmless += 1
            manager = IndexManager(store, FP, encode, 0, root=root)
            manager.open()  # rebuilds a corrupt index from the store
            if manager.index.document_ids() == want:
                fig.recovered += 1
            else:
                fig.note(f"trial {k}: the rebuilt index does not match the store")
            manager.close()
            shutil.rmtree(root)
    return fig


# -- a full disk ------------------------------------------------------------------------------


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
            sources = _sources(src, rng, 30) if what == "import" else None
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
                child = Child.python(IMPORTER, str(data), str(k), str(src), **kw)
            else:
                child = Child.python(ASKER, str(data), str(k), "100000", "3000", **kw)
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


# -- concurrent writers -----------------------------------------------------------------------


def writers(n: int, rounds: int, work: Path, rng: random.Random) -> Figures:
    fig = Figures(f"{n} concurrent writers (imports, ask, TUI indexer)")
    for r in range(rounds):
        data = work / f"writers-{n}-{r}"
        data.mkdir(parents=True)
        children = []
        sources: dict[str, str] = {}
        for i in range(n):
            role = ("import", "ask", "tui", "import")[i % 4]
            seed = str(rng.randrange(10**9))
            if role == "import":
                src = data / f"src{i}"
                sources |= _sources(src, rng, 12)
                children.append(Child.python(IMPORTER, str(data), seed, str(src)))
            elif role == "ask":
                children.append(Child.python(ASKER, str(data), seed, "15"))
            else:
                children.append(Child.python(TUI, str(data), seed, "15"))
        acks: list[Ack] = []
        for child in children:
            if child.wait(600) != 0:
                fig.note(f"round {r}: a writer failed: {child.stderr()[-300:]}")
            acks += child.acks
        fig.injected += 1
        fig.committed += len([a for a in acks if a.kind != "idx"])
        result = check_data(data, acks, sources)
        fig.lost += result.lost
        for p in result.problems:
            fig.note(f"round {r}: {p}")
        if not result.problems and not result.lost:
            fig.recovered += 1
    return fig


# -- the campaign -----------------------------------------------------------------------------


def campaign(
    *,
    kills: int,
    corruptions: int,
    real_asks: int,
    disk_runs: int,
    writer_rounds: int,
    seed: int,
    work: Path,
    real_cli: bool = True,
    log: Callable[[str], None] = lambda s: None,
) -> list[Figures]:
    rng = random.Random(seed)
    figures: list[Figures] = []

    def run(fig: Callable[[], Figures]) -> None:
        start = time.monotonic()
        result = fig()
        result.notes = (result.notes + f" {time.monotonic() - start:.0f}s").strip()
        figures.append(result)
        log(f"{result.scenario}: {result.injected} faults, {result.lost} committed rows lost")

    per = max(kills // 4, 1)
    run(lambda: kill_campaign("import", IMPORTER, per, work, rng, max_delay=1.0,
                              import_files=60))  # fmt: skip
    run(lambda: kill_campaign("ask", ASKER, per, work, rng, max_delay=0.5))
    run(lambda: kill_campaign("tui", TUI, per, work, rng, max_delay=0.5))
    run(lambda: kill_campaign("index", INDEXER, kills - 3 * per, work, rng, max_delay=1.5))
    if real_asks:
        run(lambda: real_ask_kills(real_asks, work, rng))
    base = work / "base"
    build_base(base, rng)
    db_trials = max(corruptions * 2 // 3, 1)
    start = time.monotonic()
    for part in db_corruption(db_trials, work, base, rng):
        part.notes = f"{time.monotonic() - start:.0f}s (both)"
        figures.append(part)
        log(f"{part.scenario}: {part.injected} faults, {part.detected} detected")
    run(lambda: index_corruption(corruptions - db_trials, work, base, rng))
    if disk_runs:
        run(lambda: full_disk(disk_runs, work, rng, real_cli))
    for n in (2, 4):
        run(lambda n=n: writers(n, writer_rounds, work, rng))  # type: ignore[misc]
    return figures


def markdown(figures: list[Figures]) -> str:
    head = (
        "| scenario | faults | detected | harmless | silent | recovered | committed rows"
        " | committed rows lost | rows `db recover` saved | lost more than the damaged page held"
        " | time, notes |\n"
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--|\n"
    )
    lines = []
    for f in figures:
        corrupt = f.scenario.startswith("corruption")
        detected = f"{f.detected}" + (f" ({f.unclean} unclean)" if f.unclean else "")
        saved = f"{f.rows_saved:,} of {f.rows_before:,}" if f.rows_before else ""
        bound = f"{f.over_page_bound} ({f.unbounded} interior or schema page)" if saved else ""
        lines.append(
            f"| {f.scenario} | {f.injected} | {detected if corrupt or f.detected else ''}"
            f" | {f.harmless if corrupt else ''} | {f.silent if corrupt else ''}"
            f" | {f.recovered} | {f.committed if not corrupt else ''}"
            f" | {f.lost if not corrupt else ''} | {saved} | {bound} | {f.notes} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kills", type=int, default=240, help="SIGKILLs over the four write paths")
    p.add_argument("--corruptions", type=int, default=240, help="2/3 database, 1/3 index")
    p.add_argument("--real-asks", type=int, default=5, help="kills of a real `samchat ask`")
    p.add_argument("--disk-runs", type=int, default=6, help="runs on a full disk")
    p.add_argument("--writer-rounds", type=int, default=3, help="rounds of 2 and of 4 writers")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--markdown", action="store_true", help="print the figures as a table")
    p.add_argument("--keep", action="store_true", help="keep the work directory")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="samchat-faults-"))
    start = time.monotonic()
    try:
        figures = campaign(
            kills=args.kills,
            corruptions=args.corruptions,
            real_asks=args.real_asks,
            disk_runs=args.disk_runs,
            writer_rounds=args.writer_rounds,
            seed=args.seed,
            work=work,
            log=lambda s: print(s, file=sys.stderr, flush=True),
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=1))
    if args.markdown:
        print(markdown(figures))
    for f in figures:
        for problem in f.problems:
            print(f"{f.scenario}: {problem}", file=sys.stderr)
    lost = sum(f.lost for f in figures)
    print(
        f"{sum(f.injected for f in figures)} faults in {time.monotonic() - start:.0f}s; "
        f"committed rows lost: {lost}",
        file=sys.stderr,
    )
    return 1 if lost or any(f.silent or f.over_page_bound for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
