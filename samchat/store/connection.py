"""Opening the SQLite file safely: private permissions, WAL, foreign keys, clear errors."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from samchat.errors import StoreError

BUSY_TIMEOUT_S = 30.0
# "could not decode": damaged bytes inside text that SQLite still reads.
_CORRUPT_MARKERS = ("not a database", "malformed", "corrupt", "disk image", "could not decode")


def recovery_hint(path: Path) -> str:
    return (
        f"run `samchat db recover --data-dir {path.parent}` to copy every readable chat, "
        "message and document into a new database (the damaged file is kept)"
    )


def translate(exc: sqlite3.Error, path: Path) -> StoreError:
    """Turn a sqlite3 error into a one-line StoreError that says what to do."""
    text = str(exc)
    if any(marker in text.lower() for marker in _CORRUPT_MARKERS):
        return StoreError(f"the database {path} is corrupt ({text}); {recovery_hint(path)}")
    if "disk is full" in text.lower():
        return StoreError(
            f"the disk holding {path} is full; free some space and try again "
            "(what was being saved was not, and nothing saved before is lost)"
        )
    if "locked" in text.lower() or "busy" in text.lower():
        return StoreError(
            f"the database {path} stayed locked by another samchat process for "
            f"{BUSY_TIMEOUT_S:.0f}s; try again"
        )
    if "readonly" in text.lower() or "unable to open" in text.lower():
        return StoreError(f"cannot write the database {path} ({text}); check its permissions")
    return StoreError(f"database error in {path}: {text}")


def _private_file(path: Path) -> None:
    """Create the file 0600 before SQLite does, so chats are never world-readable."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    with contextlib.suppress(PermissionError):
        os.chmod(path, 0o600)


def _enable_wal(conn: sqlite3.Connection) -> str:
    """Switch a new database to WAL. The switch needs the file to itself and SQLite reports
    "locked" at once, without the busy timeout, while another process opens the same new file:
    retry within the busy timeout. An existing database is WAL already (the mode persists)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
            if mode.lower() == "wal":
                return mode
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def connect(path: Path) -> sqlite3.Connection:
    """A connection in WAL mode with foreign keys; raises StoreError for unusable files."""
    if path.is_dir():
        raise StoreError(f"the database path {path} is a directory, not a file")
    try:
        _private_file(path)
    except OSError as exc:
        raise StoreError(f"cannot create the database {path}: {exc.strerror}") from exc
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise translate(exc, path) from exc
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        # As sqlite-utils' Database() sets it: a row an INSERT OR REPLACE removes also runs
        # the delete triggers that keep full-text search in step.
        conn.execute("PRAGMA recursive_triggers = ON")
        mode = _enable_wal(conn)
        if str(mode).lower() != "wal":
            raise StoreError(f"the database {path} cannot use WAL mode (got {mode})")
        # WAL + NORMAL: a killed process never corrupts the file; only a power cut may lose
        # the last transactions.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        conn.close()
        raise translate(exc, path) from exc
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        with contextlib.suppress(OSError):
            os.chmod(side, 0o600)
    return conn


@contextlib.contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One atomic write. BEGIN IMMEDIATE takes the write lock up front, so a concurrent writer
    waits on the busy timeout instead of failing on a stale read snapshot. Nests as a savepoint."""
    if conn.in_transaction:
        conn.execute("SAVEPOINT samchat_nested")
        try:
            yield
        except BaseException:  # a Ctrl-C too: rolled back, then re-raised
            if conn.in_transaction:
                conn.execute("ROLLBACK TO SAVEPOINT samchat_nested")
                conn.execute("RELEASE SAVEPOINT samchat_nested")
            raise
        conn.execute("RELEASE SAVEPOINT samchat_nested")
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise translate(exc, _file_of(conn)) from exc
    try:
        yield
    except BaseException:  # a Ctrl-C too: rolled back, then re-raised
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:  # e.g. a full disk: nothing of this transaction is kept
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise translate(exc, _file_of(conn)) from exc


def _file_of(conn: sqlite3.Connection) -> Path:
    """The file behind a connection, for error messages."""
    try:
        return Path(str(conn.execute("PRAGMA database_list").fetchone()[2]))
    except (sqlite3.Error, TypeError):
        return Path("(the database)")
