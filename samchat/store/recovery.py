"""Checking the database in depth, and salvaging every readable row of a damaged one.

`recover()` builds a new database next to the damaged one and copies into it every row it can
still read from every ordinary table of the damaged file's schema (chats, messages, documents,
whatever later migrations add), reading past damaged pages with Python's sqlite3 alone:

- a scan in rowid order (`WHERE rowid > ?`) stops at the first damaged page; probing forward
  (exponential, then binary search on `WHERE rowid >= ?`) finds the next readable row, where the
  scan resumes, so a damaged leaf page costs only the rows stored on it;
- ids that the table's own pages no longer give but its indexes or its full-text index still
  list are fetched one by one (`WHERE rowid = ?`); their union is the "of N" of the report.

The full-text indexes are rebuilt, references to rows that were lost are cleared (a reply whose
question was lost becomes a root) or the orphan is dropped, the damaged file and its WAL are
kept aside, and the static index (derived data) is dropped so it is rebuilt from the new store.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from samchat.errors import StoreError

_MIN_ROWID = -(2**63)
_MAX_ROWID = 2**63 - 1
# Reported first, in this order; other tables follow by name.
_MAIN_TABLES = ("chats", "messages", "documents")
_FTS_SHADOWS = ("_data", "_idx", "_content", "_docsize", "_config")
# Columns samchat parses as JSON: a damaged value there is cleared, or reading the row would fail.
_JSON_COLUMNS = {"messages": ("stats", "accepted_by_drafter")}


@dataclass
class TableSalvage:
    """One table: rows copied into the new database, and how many the damaged file still lists
    (`known`: distinct ids found in the table's readable pages, its indexes and its full-text
    index's per-row records)."""

    saved: int = 0
    known: int = 0
    exact: bool = True  # False: some ids could not be read either, `known` is a lower bound
    orphans: int = 0  # copied, then dropped: the row they belong to was lost
    cleared: int = 0  # damaged JSON values cleared (the row is kept)
    placeholders: int = 0  # rows made up so that rows pointing at a lost one stay (chats)

    @property
    def lost(self) -> int:
        return max(self.known - self.saved, 0)


@dataclass
class RecoveryResult:
    moved_to: Path
    tables: dict[str, TableSalvage] = field(default_factory=dict)
    readable: bool = True  # False when not even the schema could be read
    index_dropped: Path | None = None

    @property
    def salvaged(self) -> dict[str, int]:
        """Chats, messages and documents saved (`tables` has every table)."""
        return {name: t.saved for name, t in self.tables.items() if name in _MAIN_TABLES}

    def summary(self) -> str:
        """`recovered 1,204 of 1,210 messages, 14 of 14 documents, ...`"""
        parts = []
        for name, t in self.tables.items():
            if not (t.known or t.saved or name in _MAIN_TABLES):
                continue
            if not t.known and not t.exact:
                parts.append(f"0 {name} (none could be read)")
                continue
            part = f"{t.saved:,} of {'' if t.exact else 'at least '}{t.known:,} {name}"
            if t.placeholders:
                part += f" (+{t.placeholders:,} made up for rows that were kept)"
            if t.cleared:
                part += f" ({t.cleared:,} with a damaged value cleared)"
            parts.append(part)
        return "recovered " + ", ".join(parts) if parts else "recovered nothing"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _connect_damaged(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    # A damaged byte inside a text is not valid UTF-8: keep the row, with U+FFFD there.
    conn.text_factory = _lenient_text
    conn.execute("PRAGMA query_only = ON")
    # Keeps the part of the schema that loads when some of it cannot (a damaged page of the
    # schema or of a full-text index's config): the tables it names stay readable.
    conn.execute("PRAGMA writable_schema = ON")
    return conn


def _tables(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """(name, sql) of every table in the schema, as far as its pages can be read."""
    out: list[tuple[str, str]] = []
    with contextlib.suppress(sqlite3.Error):
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"):
            out.append((str(name), str(sql or "")))
    return out


def _fts_tables(conn: sqlite3.Connection) -> dict[str, str | None]:
    """fts5 tables -> the table they index (their external content), from the schema."""
    out: dict[str, str | None] = {}
    for name, sql in _tables(conn):
        if not sql.upper().startswith("CREATE VIRTUAL") or "fts5" not in sql.lower():
            continue
        m = re.search(r"content\s*=\s*['\"]([^'\"]+)['\"]", sql)
        out[name] = m.group(1) if m else None
    return out


def _ordinary_tables(conn: sqlite3.Connection) -> list[str]:
    """Tables holding user data: not sqlite_*, schema_version, virtual or shadow tables."""
    tables = _tables(conn)
    virtual = {name for name, sql in tables if sql.upper().startswith("CREATE VIRTUAL")}
    names = []
    for name, _sql in tables:
        if name.startswith("sqlite_") or name == "schema_version" or name in virtual:
            continue
        if any(name == v + s for v in virtual for s in _FTS_SHADOWS):
            continue
        names.append(name)
    return names


def _parents_first(conn: sqlite3.Connection, tables: list[str]) -> list[str]:
    """Tables ordered so that every table comes after the tables its foreign keys point to."""
    deps = {
        t: {str(r[2]) for r in conn.execute(f"PRAGMA foreign_key_list({_q(t)})")} - {t}
        for t in tables
    }
    ordered: list[str] = []
    pending = sorted(tables, key=lambda t: (t not in _MAIN_TABLES, _order(t), t))
    while pending:
        ready = [t for t in pending if not (deps[t] & set(pending))] or pending[:1]  # a cycle
        for t in ready:
            ordered.append(t)
            pending.remove(t)
    return ordered


def _order(table: str) -> int:
    return _MAIN_TABLES.index(table) if table in _MAIN_TABLES else len(_MAIN_TABLES)


class _Reader:
    """Reads one table of the damaged file past its damaged pages."""

    def __init__(self, conn: sqlite3.Connection, table: str, columns: list[str]) -> None:
        self.conn = conn
        self.table = table
        cols = ", ".join(_q(c) for c in columns)
        self.select = f"SELECT rowid, {cols} FROM {_q(table)}"
        self.errors = 0

    def _first_from(self, x: int) -> tuple[bool, tuple[object, ...] | None]:
        """(readable, the first row with rowid >= x, whole): a seek that avoids damaged pages."""
        try:
            row = self.conn.execute(
                f"{self.select} WHERE rowid >= ? ORDER BY rowid LIMIT 1", (x,)
            ).fetchone()
        except sqlite3.Error:
            return False, None
        return True, row

    def _next_readable(self, after: int) -> int | None:
        """The smallest x > after from which a seek reads again; None if nothing is left."""
        bad, step = after, 1
        while True:
            x = min(after + step, _MAX_ROWID)
            ok, row = self._first_from(x)
            if ok:
                break
            bad = x
            if x >= _MAX_ROWID:
                return None
            step *= 2
        if row is None and x == bad + 1:
            return None
        good = x
        while good - bad > 1:  # bad fails, good reads
            mid = (bad + good) // 2
            if self._first_from(mid)[0]:
                good = mid
            else:
                bad = mid
        return good

    def scan(self) -> dict[int, tuple[object, ...]]:
        rows: dict[int, tuple[object, ...]] = {}
        lo = _MIN_ROWID - 1  # every rowid read so far is <= lo
        while True:
            try:
                query = (
                    (f"{self.select} ORDER BY rowid", ())
                    if lo < _MIN_ROWID
                    else (f"{self.select} WHERE rowid > ? ORDER BY rowid", (lo,))
                )
                for row in self.conn.execute(*query):
                    if int(row[0]) <= lo:  # out of order: a damaged page links back
                        raise sqlite3.DatabaseError("rowids out of order")
                    rows[int(row[0])] = tuple(row[1:])
                    lo = int(row[0])
                return rows
            except sqlite3.Error:
                self.errors += 1
                if lo >= _MAX_ROWID:
                    return rows
                nxt = self._next_readable(max(lo, _MIN_ROWID))
                if nxt is None:
                    return rows
                lo = max(nxt - 1, lo + 1)  # always forward

    def fetch(self, rowid: int) -> tuple[object, ...] | None:
        try:
            row = self.conn.execute(f"{self.select} WHERE rowid = ?", (rowid,)).fetchone()
        except sqlite3.Error:
            return None
        return None if row is None else tuple(row[1:])


def _ids_until_error(conn: sqlite3.Connection, sql: str) -> tuple[set[int], bool]:
    """The ids a query gives until an error, and whether it got to the end."""
    ids: set[int] = set()
    try:
        for (rowid,) in conn.execute(sql):
            if isinstance(rowid, int):
                ids.add(rowid)
    except sqlite3.Error:
        return ids, False
    return ids, True


def _listed_ids(
    conn: sqlite3.Connection, table: str, fts: dict[str, str | None]
) -> tuple[set[int], bool]:
    """Ids of `table` that its indexes and full-text indexes still list (pages apart from the
    table's own, so they usually survive a damaged table page), and whether one of them could
    be read whole (then it lists every row)."""
    ids: set[int] = set()
    whole = False
    try:
        index_list = conn.execute(f"PRAGMA index_list({_q(table)})").fetchall()
    except sqlite3.Error:
        index_list = []
    for row in index_list:
        name, partial = str(row[1]), bool(row[4]) if len(row) > 4 else False
        if partial:
            continue
        found, ok = _ids_until_error(conn, f"SELECT rowid FROM {_q(table)} INDEXED BY {_q(name)}")
        ids |= found
        whole = whole or ok
    for vt, content in fts.items():
        if content == table:
            docsize = _Reader(conn, f"{vt}_docsize", ["id"])
            with contextlib.suppress(sqlite3.Error):
                ids |= set(docsize.scan())
                whole = whole or not docsize.errors
    return ids, whole


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({_q(table)})")]


def _copy_table(
    old: sqlite3.Connection,
    new: sqlite3.Connection,
    table: str,
    fts: dict[str, str | None],
) -> TableSalvage:
    wanted = set(_columns(new, table))
    columns = [c for c in _columns(old, table) if c in wanted]
    result = TableSalvage()
    if not columns:
        return result
    reader = _Reader(old, table, columns)
    rows = reader.scan()
    listed, whole = _listed_ids(old, table, fts)
    for rowid in sorted(listed - rows.keys()):
        row = reader.fetch(rowid)
        if row is not None:
            rows[rowid] = row
    result.known = len(listed | rows.keys())
    result.exact = whole or not reader.errors
    sql = (
        f"INSERT OR IGNORE INTO {_q(table)} ({', '.join(_q(c) for c in columns)}) "
        f"VALUES ({', '.join('?' for _ in columns)})"
    )
    for rowid in sorted(rows):
        with contextlib.suppress(sqlite3.Error):  # a row the new schema rejects is lost
            result.saved += new.execute(sql, rows[rowid]).rowcount
    return result


def _placeholder_chat(new: sqlite3.Connection, table: str, rowid: int, column: str) -> bool:
    """A chat row was lost but its messages were not: give them a chat again."""
    row = new.execute(f"SELECT {_q(column)} FROM {_q(table)} WHERE rowid = ?", (rowid,))
    found = row.fetchone()
    if found is None or found[0] is None:
        return False
    chat_id = found[0]
    when = time.time()
    if table == "messages":
        first = new.execute(
            "SELECT MIN(created_at), MAX(created_at) FROM messages WHERE chat_id = ?", (chat_id,)
        ).fetchone()
        if first and first[0] is not None:
            when = float(first[0])
    new.execute(
        "INSERT OR IGNORE INTO chats (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
        (chat_id, f"recovered chat {chat_id}", when, when),
    )
    return True


def _fix_dangling(new: sqlite3.Connection, results: dict[str, TableSalvage]) -> None:
    """Rows that point at a lost row: a chat gets a placeholder (its messages are kept), a
    nullable reference is cleared (a reply whose question was lost becomes a root), any other
    row is dropped (a passage of a lost document), until nothing dangles."""
    for _ in range(100):
        problems = new.execute("PRAGMA foreign_key_check").fetchall()
        if not problems:
            return
        for table, rowid, parent, fkid in problems:
            fk = [r for r in new.execute(f"PRAGMA foreign_key_list({_q(table)})") if r[0] == fkid]
            info = {str(r[1]): bool(r[3]) for r in new.execute(f"PRAGMA table_info({_q(table)})")}
            cols = [str(r[3]) for r in fk]
            if (
                parent == "chats"
                and len(cols) == 1
                and _placeholder_chat(new, table, rowid, cols[0])
            ):
                results.setdefault("chats", TableSalvage()).placeholders += 1
            elif cols and not any(info.get(c, True) for c in cols):  # every column nullable
                sets = ", ".join(f"{_q(c)} = NULL" for c in cols)
                new.execute(f"UPDATE {_q(table)} SET {sets} WHERE rowid = ?", (rowid,))
            else:
                new.execute(f"DELETE FROM {_q(table)} WHERE rowid = ?", (rowid,))
                if table in results:
                    results[table].saved -= 1
                    results[table].orphans += 1


def _clear_bad_json(new: sqlite3.Connection, results: dict[str, TableSalvage]) -> None:
    for table, columns in _JSON_COLUMNS.items():
        if table not in results:
            continue
        have = set(_columns(new, table))
        for column in (c for c in columns if c in have):
            rows = new.execute(
                f"SELECT rowid, {_q(column)} FROM {_q(table)} WHERE {_q(column)} IS NOT NULL"
            ).fetchall()
            for rowid, value in rows:
                try:
                    json.loads(value)
                except (TypeError, ValueError):
                    new.execute(
                        f"UPDATE {_q(table)} SET {_q(column)} = NULL WHERE rowid = ?", (rowid,)
                    )
                    results[table].cleared += 1


def _rebuild_fts(new: sqlite3.Connection) -> None:
    for vt in _fts_tables(new):
        new.execute(f"INSERT INTO {_q(vt)}({_q(vt)}) VALUES ('rebuild')")


def _schema_version(conn: sqlite3.Connection) -> int | None:
    try:
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    except sqlite3.Error:
        return None
    return int(row[0]) if row and row[0] is not None else None


def _salvage(old_path: Path, new: sqlite3.Connection, result: RecoveryResult) -> None:
    from samchat.store.migrations import LATEST

    try:
        old = _connect_damaged(old_path)
    except sqlite3.Error:
        result.readable = False
        return
    try:
        try:
            tables = _ordinary_tables(old)
            fts = _fts_tables(old)
        except sqlite3.Error:
            result.readable = False
            return
        version = _schema_version(old)
        if version is not None and version > LATEST:
            raise StoreError(
                f"the database {old_path} has schema version {version}, newer than this "
                f"samchat knows ({LATEST}); recover it with a newer samchat"
            )
        new_tables = set(_ordinary_tables(new))
        new.execute("PRAGMA foreign_keys = OFF")  # children may come before a lost parent
        new.execute("BEGIN IMMEDIATE")
        for table in _parents_first(new, [t for t in tables if t in new_tables]):
            result.tables[table] = _copy_table(old, new, table, fts)
        _fix_dangling(new, result.tables)
        _clear_bad_json(new, result.tables)
        _rebuild_fts(new)
        new.execute("COMMIT")
        new.execute("PRAGMA foreign_keys = ON")
    finally:
        old.close()
    result.tables = {
        t: result.tables[t]
        for t in sorted(result.tables, key=lambda t: (t not in _MAIN_TABLES, _order(t), t))
    }


def _aside(path: Path, stamp: str) -> Path:
    moved = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while moved.exists():
        moved = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    return moved


def _drop_static_index(root: Path, stamp: str) -> Path | None:
    """The static index is derived from the store and keyed by row id: ids of lost rows may be
    reused by new rows, so it must be rebuilt from the recovered store (its next open does)."""
    if not root.is_dir():
        return None
    stale = root.with_name(f"{root.name}.stale-{stamp}")
    try:
        root.rename(stale)
    except OSError:
        shutil.rmtree(root, ignore_errors=True)
        return root
    shutil.rmtree(stale, ignore_errors=True)
    return root


def _side_files(path: Path) -> Iterable[Path]:
    return (Path(str(path) + s) for s in ("-wal", "-shm", "-journal"))


def recover(path: Path, index_root: Path | None = None) -> RecoveryResult:
    """Copy every readable row of the database at `path` into a new database that replaces it;
    the damaged file (and its WAL) is kept as `<name>.corrupt-<time>`. `index_root` is the static
    index directory to drop (default: `index/` next to the database)."""
    from samchat.store.store import Store  # the new database gets the full schema

    if not path.exists():
        raise StoreError(f"there is no database at {path} to recover")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    building = path.with_name(f"{path.name}.recovering")
    for leftover in (building, *_side_files(building)):  # from a recover that was interrupted
        leftover.unlink(missing_ok=True)
    moved = _aside(path, stamp)
    result = RecoveryResult(moved_to=moved)
    store = Store.open(building)
    try:
        _salvage(path, store.conn, result)
    except sqlite3.Error as exc:
        store.close()
        for leftover in (building, *_side_files(building)):
            leftover.unlink(missing_ok=True)
        raise StoreError(f"cannot write the recovered database {building}: {exc}") from exc
    except BaseException:  # a Ctrl-C too: no half-built file left, then re-raised
        store.close()
        for leftover in (building, *_side_files(building)):
            leftover.unlink(missing_ok=True)
        raise
    store.close()  # the last connection: its WAL is checkpointed into the file and removed
    # Keep the damaged file under its new name before anything replaces it; its WAL goes with
    # it (a stale WAL next to the new file would be replayed into it).
    try:
        os.link(path, moved)
    except OSError:
        path.rename(moved)
    for side in _side_files(path):
        if side.exists():
            side.rename(Path(str(moved) + side.name[len(path.name) :]))
    os.replace(building, path)
    with contextlib.suppress(OSError):
        os.chmod(moved, 0o600)
    result.index_dropped = _drop_static_index(index_root or path.parent / "index", stamp)
    return result


def deep_check(conn: sqlite3.Connection) -> str:
    """`ok`, or what is wrong: SQLite's integrity check, then every full-text index against the
    rows it indexes (a damaged text that SQLite's own check cannot see shows up there)."""
    verdict = str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    if verdict != "ok":
        return verdict
    for vt, content in _fts_tables(conn).items():
        try:
            if content is None:
                conn.execute(f"INSERT INTO {_q(vt)}({_q(vt)}) VALUES ('integrity-check')")
            else:
                conn.execute(f"INSERT INTO {_q(vt)}({_q(vt)}, rank) VALUES ('integrity-check', 1)")
        except sqlite3.Error as exc:
            return f"the full-text index {vt} does not match its rows ({exc})"
    return "ok"
