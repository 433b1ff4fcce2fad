"""Corrupting the database: random bytes on a random page, or the file cut short; each damage
samchat detects is recovered (`samchat db recover`) and what it saved is compared, row by row,
with what the file held."""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from fault_campaign.figures import Figures
from samchat.errors import SamchatError
from samchat.store import Store, deep_check, recover


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
