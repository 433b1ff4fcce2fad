"""Numbered schema migrations and the runner that applies them.

A migration is a function of a `sqlite_utils.Database` (as in simonw/llm): `table.create()`,
`add_column()`, `create_index()`, `enable_fts()` and, for changes ALTER TABLE cannot make,
`table.transform()`. Migration N is `MIGRATIONS[N - 1]`; the `schema_version` table records the
versions applied. Each one runs in one transaction together with the bump of `schema_version`,
so a database is always at exactly one known version. Never edit a released migration (the
schema it builds must stay what older samchats built): add a new one.

Plain SQL is kept where sqlite-utils cannot say the same thing: a CHECK constraint (`create()`
has no parameter for one) and a partial index (`create_index()` has no WHERE).

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


def m001_chats_messages_documents(db: Database) -> None:
    """The first schema: chats, branching messages, documents."""
    db.table("chats").create(
        {
            "id": int,
            "title": str,
            "model": str,
            "system_prompt": str,
            "created_at": float,
            "updated_at": float,
        },
        pk="id",
        not_null={"title", "created_at", "updated_at"},
    )
    # Plain SQL: create() cannot declare the CHECK on role.
    db.execute(
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
    )"""
    )
    messages = db.table("messages")
    messages.create_index(["chat_id", "id"], index_name="messages_chat")
    messages.create_index(["parent_id"], index_name="messages_parent")
    documents = db.table("documents").create(
        {
            "id": int,
            "source": str,
            "title": str,
            "content_hash": str,
            "kind": str,
            "text": str,
            "imported_at": float,
            "token_count": int,
        },
        pk="id",
        not_null={"source", "title", "content_hash", "kind", "text", "imported_at"},
    )
    # The same text is stored once (add_document's INSERT OR IGNORE relies on it).
    documents.create_index(["content_hash"], index_name="documents_content_hash", unique=True)


def m002_full_text_search(db: Database) -> None:
    """Full-text search over messages and documents: external-content FTS5 tables kept in step
    by triggers, filled with the rows that already exist."""
    db.table("messages").enable_fts(["content"], create_triggers=True, tokenize=_FTS_TOKENIZER)
    db.table("documents").enable_fts(
        ["title", "text"], create_triggers=True, tokenize=_FTS_TOKENIZER
    )


def m003_stats_sources_corpora_indexes(db: Database) -> None:
    """Full reply statistics, imported chats, bundled corpora, static indexes per tokenizer."""
    messages = db.table("messages")
    messages.add_column("tokens_per_s", float)
    messages.add_column("steps", int)
    messages.add_column("accepted_by_drafter", str)  # JSON {drafter: tokens}
    messages.add_column("finish_reason", str)
    messages.add_column("stats", str)  # JSON: every field the engine reported
    chats = db.table("chats")
    chats.add_column("source", str)  # e.g. chatgpt:<conversation id>
    # Plain SQL: create_index() cannot make a partial index.
    db.execute("CREATE UNIQUE INDEX chats_source ON chats(source) WHERE source IS NOT NULL")
    chats.create_index(["updated_at"], index_name="chats_updated")
    documents = db.table("documents")
    documents.add_column("corpus", str)  # bundled corpus pack name, or NULL
    documents.create_index(["corpus"], index_name="documents_corpus")
    db.table("indexes").create(
        {"fingerprint": str, "separator": int, "model": str, "updated_at": float},
        pk="fingerprint",
        not_null={"separator", "updated_at"},
    )


MIGRATIONS: list[Migration] = [
    m001_chats_messages_documents,
    m002_full_text_search,
    m003_stats_sources_corpora_indexes,
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
    a table that others reference ON DELETE CASCADE drops no rows; `PRAGMA foreign_key_check`
    must come back empty before a step commits.
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
                db.table("schema_version").create(
                    {"version": int, "applied_at": float},
                    pk="version",
                    not_null={"applied_at"},
                    if_not_exists=True,
                )
                version = current_version(conn)
                if version >= target:
                    conn.execute("COMMIT")
                    return version
                try:
                    MIGRATIONS[version](db)
                except (sqlite3.Error, StoreError):
                    raise
                except Exception as exc:  # sqlite-utils' own errors (AlterError, ...)
                    raise StoreError(
                        f"cannot update the database to schema version {version + 1} "
                        f"({type(exc).__name__}: {exc}); it stays at version {version}"
                    ) from exc
                if foreign_keys and conn.execute("PRAGMA foreign_key_check").fetchone():
                    raise StoreError(
                        f"updating the database to schema version {version + 1} would break "
                        f"links between its rows; it stays at version {version}"
                    )
                conn.execute(
                    "INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                    (version + 1, time.time()),
                )
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
    finally:
        if foreign_keys:
            conn.execute("PRAGMA foreign_keys = ON")
