"""Numbered schema migrations and the runner that applies them.

Each migration is a list of SQL statements applied in one transaction together with the bump of
`schema_version`, so a database is always at exactly one known version. Never edit a released
migration: add a new one.
"""

from __future__ import annotations

import sqlite3
import time

from samchat.errors import StoreError

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

MIGRATIONS: list[list[str]] = [_V1, _V2, _V3]
LATEST = len(MIGRATIONS)


def current_version(conn: sqlite3.Connection) -> int:
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if not has_table:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(conn: sqlite3.Connection, target: int = LATEST) -> int:
    """Bring the database up to `target`; returns the version it ends at.

    Each step takes the write lock first (BEGIN IMMEDIATE) and re-reads the version, so two
    processes opening an old database at once apply every step exactly once.
    """
    if current_version(conn) > LATEST:
        raise StoreError(
            f"the database has schema version {current_version(conn)}, newer than this samchat "
            f"knows ({LATEST}); upgrade samchat"
        )
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
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                (version + 1, time.time()),
            )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
