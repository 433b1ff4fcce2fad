"""Moving a corrupt database aside and saving what can still be read from it."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from samchat.errors import StoreError

# Tables worth salvaging, parents first so foreign keys hold in the fresh database.
_SALVAGE_TABLES = ("chats", "messages", "documents")


@dataclass
class RecoveryResult:
    moved_to: Path
    salvaged: dict[str, int] = field(default_factory=dict)


def _readable_rows(old: Path, table: str) -> list[sqlite3.Row]:
    rows: list[sqlite3.Row] = []
    try:
        conn = sqlite3.connect(f"file:{old}?mode=ro", uri=True)
    except sqlite3.Error:
        return rows
    conn.row_factory = sqlite3.Row
    try:
        cursor = conn.execute(f"SELECT * FROM {table} ORDER BY rowid")
        while True:
            # Read row by row so a damaged page late in the table keeps the rows before it.
            try:
                row = cursor.fetchone()
            except sqlite3.Error:
                break
            if row is None:
                break
            rows.append(row)
    except sqlite3.Error:
        pass
    finally:
        conn.close()
    return rows


def recover(path: Path) -> RecoveryResult:
    """Rename `path` (and its WAL files) to `<name>.corrupt-<time>`, create a fresh database and
    copy into it every chat, message and document row that can still be read. Nothing is deleted:
    the damaged file stays next to the new one."""
    from samchat.store.store import Store  # the fresh database gets the full schema

    if not path.exists():
        raise StoreError(f"there is no database at {path} to recover")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    moved = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while moved.exists():
        moved = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    path.rename(moved)
    for suffix in ("-wal", "-shm"):
        side = Path(str(path) + suffix)
        if side.exists():
            side.rename(Path(str(moved) + suffix))
    result = RecoveryResult(moved_to=moved)
    store = Store.open(path)
    try:
        conn = store.conn
        columns = {
            table: {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            for table in _SALVAGE_TABLES
        }
        for table in _SALVAGE_TABLES:
            copied = 0
            for row in _readable_rows(moved, table):
                keys = [k for k in row.keys() if k in columns[table]]  # noqa: SIM118 (Row iterates values)
                sql = (
                    f"INSERT OR IGNORE INTO {table} ({', '.join(keys)}) "
                    f"VALUES ({', '.join('?' for _ in keys)})"
                )
                with contextlib.suppress(sqlite3.Error):
                    copied += conn.execute(sql, [row[k] for k in keys]).rowcount
            conn.commit()
            result.salvaged[table] = copied
    finally:
        store.close()
    return result
