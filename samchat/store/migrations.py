"""Numbered schema migrations and the runner that applies them.

A migration is a function of a `sqlite_utils.Database` (as in simonw/llm): new ones use
`table.create()`, `add_column()`, `create_index()`, `enable_fts()` and, for changes ALTER TABLE
cannot make, `table.transform()`. Migration N is `MIGRATIONS[N - 1]`; the `schema_version` table
records the versions applied. Each one runs in one transaction together with the bump of
`schema_version`, so a database is always at exactly one known version. Never edit a released
migration (the schema it builds must stay what older samchats built): add a new one. The
released ones (1-3) are the SQL they shipped with, run through the same runner.

sqlite-utils is imported only when a migration has to run: opening an up-to-date database (every
start but the first) reads `schema_version` and nothing else.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from samchat.errors import StoreError

if TYPE_CHECKING:
    from sqlite_utils import Database

Migration = Callable[["Database"], None]
_FTS_TOKENIZER = "porter unicode61"


# 1: the first schema: chats, branching messages, documents.
_V1 = [
    """CREATE TABLE chats (
        id INTEGER PRIMARY KEY,
        title TEXT NOT NULL,
        model TEXT,
        system_prompt TEXT,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )""",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        chat_id INTEGER NOT NULL REFERENCES chats(id) ON DELETE CASCADE,
        parent_id INTEGER REFERENCES messages(id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL,
        model TEXT,
        created_at REAL NOT NULL,
        tokens INTEGER,
        seconds REAL,
        mat REAL,
        speedup REAL
    )""",
    "CREATE INDEX messages_chat ON messages(chat_id, id)",
    "CREATE INDEX messages_parent ON messages(parent_id)",
    """CREATE TABLE documents (
        id INTEGER PRIMARY KEY,
        source TEXT NOT NULL,
        title TEXT NOT NULL,
        content_hash TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        imported_at REAL NOT NULL,
        token_count INTEGER
    )""",
]


def _fts(table: str, columns: list[str]) -> list[str]:
    """An external-content FTS5 table kept in step with `table` by triggers, then filled."""
    cols = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    old = ", ".join(f"old.{c}" for c in columns)
    fts = f"{table}_fts"
    return [
        f"CREATE VIRTUAL TABLE {fts} USING fts5({cols}, content='{table}', content_rowid='id',"
        " tokenize='porter unicode61')",
        f"CREATE TRIGGER {table}_ai AFTER INSERT ON {table} BEGIN"
        f" INSERT INTO {fts}(rowid, {cols}) VALUES (new.id, {new}); END",
        f"CREATE TRIGGER {table}_ad AFTER DELETE ON {table} BEGIN"
        f" INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.id, {old}); END",
        f"CREATE TRIGGER {table}_au AFTER UPDATE ON {table} BEGIN"
        f" INSERT INTO {fts}({fts}, rowid, {cols}) VALUES ('delete', old.id, {old});"
        f" INSERT INTO {fts}(rowid, {cols}) VALUES (new.id, {new}); END",
        f"INSERT INTO {fts}({fts}) VALUES ('rebuild')",
    ]


# 2: full-text search over messages and documents (backfills rows that already exist).
_V2 = _fts("messages", ["content"]) + _fts("documents", ["title", "text"])

# 3: full reply statistics, imported chats, bundled corpora, static indexes per tokenizer.
_V3 = [
    "ALTER TABLE messages ADD COLUMN tokens_per_s REAL",
    "ALTER TABLE messages ADD COLUMN steps INTEGER",
    "ALTER TABLE messages ADD COLUMN accepted_by_drafter TEXT",  # JSON {drafter: tokens}
    "ALTER TABLE messages ADD COLUMN finish_reason TEXT",
    "ALTER TABLE messages ADD COLUMN stats TEXT",  # JSON: every field the engine reported
    "ALTER TABLE chats ADD COLUMN source TEXT",  # e.g. chatgpt:<conversation id>
    "CREATE UNIQUE INDEX chats_source ON chats(source) WHERE source IS NOT NULL",
    "CREATE INDEX chats_updated ON chats(updated_at)",
    "ALTER TABLE documents ADD COLUMN corpus TEXT",  # bundled corpus pack name, or NULL
    "CREATE INDEX documents_corpus ON documents(corpus)",
    """CREATE TABLE indexes (
        fingerprint TEXT PRIMARY KEY,
        separator INTEGER NOT NULL,
        model TEXT,
        updated_at REAL NOT NULL
    )""",
]


def _v4_passages(db: Database) -> None:
    """Documents split into passages, with full-text search over them; backfilled."""
    from samchat.passages import split_passages

    # SQL: sqlite-utils' create() cannot declare ON DELETE CASCADE, which `rm` relies on.
    db.execute(
        """CREATE TABLE passages (
            id INTEGER PRIMARY KEY,
            document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            heading TEXT NOT NULL,
            text TEXT NOT NULL
        )"""
    )
    db.execute("CREATE UNIQUE INDEX passages_document ON passages(document_id, seq)")
    for statement in _fts("passages", ["heading", "text"]):
        db.execute(statement)
    docs = db.execute("SELECT id, kind, text FROM documents ORDER BY id").fetchall()
    for doc_id, kind, text in docs:
        db.conn.executemany(
            "INSERT INTO passages (document_id, seq, heading, text) VALUES (?, ?, ?, ?)",
            [(doc_id, i, c.heading, c.text) for i, c in enumerate(split_passages(text, kind))],
        )


def _statements(statements: list[str], doc: str) -> Migration:
    def run(db: Database) -> None:
        for statement in statements:
            db.execute(statement)

    run.__doc__ = doc
    return run


# Released: 1-3 run the SQL they shipped with, so a new database gets exactly the schema older
# samchats built (and every later migration meets one shape). New ones use sqlite-utils.
MIGRATIONS: list[Migration] = [
    _statements(_V1, "chats, branching messages, documents"),
    _statements(_V2, "full-text search over messages and documents"),
    _statements(_V3, "reply statistics, imported chats, corpora, static indexes"),
    _v4_passages,
]
LATEST = len(MIGRATIONS)


def current_version(conn: sqlite3.Connection) -> int:
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not has_table:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def _database(conn: sqlite3.Connection) -> Database:
    import sqlite_utils

    if not hasattr(sqlite_utils.Database, "atomic"):
        # 3.x commits the caller's transaction inside executescript() and transform().
        raise StoreError(
            "updating the database schema needs sqlite-utils 4.0 or newer; "
            "run `pip install -U sqlite-utils`"
        )
    return sqlite_utils.Database(conn, execute_plugins=False)


def migrate(conn: sqlite3.Connection, target: int | None = None) -> int:
    """Bring the database up to `target` (default: the latest); returns the version it ends at.

    Each step takes the write lock first (BEGIN IMMEDIATE) and re-reads the version, so two
    processes opening an old database at once apply every step exactly once. Foreign keys are
    off while the steps run (the pragma cannot change inside a transaction), so a transform() of
    a table that others reference ON DELETE CASCADE drops no rows; a step that breaks a link
    `PRAGMA foreign_key_check` did not already report is rolled back.
    """
    latest = len(MIGRATIONS)
    target = latest if target is None else target
    version = current_version(conn)
    if version > latest:
        raise StoreError(
            f"the database has schema version {version}, newer than this samchat "
            f"knows ({latest}); upgrade samchat"
        )
    if version >= target:
        return version
    db = _database(conn)
    foreign_keys = bool(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    if foreign_keys:
        conn.execute("PRAGMA foreign_keys = OFF")
    try:
        while True:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS schema_version "
                    "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
                )
                version = current_version(conn)
                if version >= target:
                    conn.execute("COMMIT")
                    return version
                # Links a manual edit or an old bug already broke are not this step's doing.
                broken = set(conn.execute("PRAGMA foreign_key_check").fetchall())
                try:
                    MIGRATIONS[version](db)
                except (sqlite3.Error, StoreError):
                    raise
                except Exception as exc:  # sqlite-utils' own errors (AlterError, ...)
                    raise StoreError(
                        f"cannot update the database to schema version {version + 1} "
                        f"({type(exc).__name__}: {exc}); it stays at version {version}"
                    ) from exc
                if not conn.in_transaction:  # a step must not commit half of itself
                    raise StoreError(
                        f"schema step {version + 1} ended its transaction early; "
                        "the database may be half updated: run `samchat db check`"
                    )
                now_broken = set(conn.execute("PRAGMA foreign_key_check").fetchall())
                if foreign_keys and now_broken - broken:
                    raise StoreError(
                        f"updating the database to schema version {version + 1} would break "
                        f"links between its rows; it stays at version {version}"
                    )
                conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                    (version + 1, time.time()),
                )
                conn.execute("COMMIT")
            except BaseException:  # a Ctrl-C too: rolled back, then re-raised
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
    finally:
        if foreign_keys:
            conn.execute("PRAGMA foreign_keys = ON")
