"""Migrations upgrade an older database in place, keeping its data."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from samchat.errors import StoreError
from samchat.figures import StoredStats
from samchat.store import Store
from samchat.store.migrations import LATEST, current_version, migrate

if TYPE_CHECKING:
    from sqlite_utils import Database


def _v1_database(path: Path) -> None:
    conn = sqlite3.connect(path)
    assert migrate(conn, target=1) == 1
    conn.execute("INSERT INTO chats VALUES (1, 'old chat', 'm', NULL, 1.0, 2.0)")
    conn.execute(
        "INSERT INTO messages VALUES (1, 1, NULL, 'user', 'an ancient question', 'm', 1.0,"
        " NULL, NULL, NULL, NULL)"
    )
    conn.execute(
        "INSERT INTO documents VALUES (1, '/old.txt', 'Old', 'h1', 'text',"
        " 'an ancient document about warranty', 1.0, 7)"
    )
    conn.commit()
    conn.close()


def test_v1_database_upgrades_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    _v1_database(path)
    with Store.open(path) as store:
        assert current_version(store.conn) == LATEST
        # v2 backfilled full-text search over rows written before it existed.
        assert {h.kind for h in store.search("ancient")} == {"message", "document"}
        # v3 columns are usable on the old rows.
        assert store.message(1).stats is None
        m = store.add_message(1, "assistant", "new", 1, stats=StoredStats.parse({"steps": 3}))
        record = store.message(m).stats
        assert record is not None and record.reply.steps == 3
        assert store.documents()[0].corpus is None and store.documents()[0].token_count == 7
        assert store.chat(1).title == "old chat"
    # Opening again is a no-op.
    with Store.open(path) as store:
        versions = store.conn.execute("SELECT version FROM schema_version").fetchall()
        assert [v[0] for v in versions] == list(range(1, LATEST + 1))


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    Store.open(path).close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_version VALUES (?, 0)", (LATEST + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        Store.open(path)


def test_failed_migration_rolls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from samchat.store import migrations

    path = tmp_path / "samchat.db"
    _v1_database(path)

    def broken(db: Database) -> None:
        db.table("chats").add_column("x", str)
        db.execute("NOT SQL")

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS[:2], broken])
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.Error):
        migrate(conn, target=3)
    assert current_version(conn) == 2  # v2 committed, v3 left no trace
    cols = [r[1] for r in conn.execute("PRAGMA table_info(chats)")]
    assert "x" not in cols
    conn.close()


# The migrations as plain SQL, exactly as samchat ran them before they moved to sqlite-utils:
# databases in the wild were built by these and must upgrade to the same schema.
_OLD_V1 = [
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


def _old_fts(table: str, columns: list[str]) -> list[str]:
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


_OLD_V2 = _old_fts("messages", ["content"]) + _old_fts("documents", ["title", "text"])
_OLD_V3 = [
    "ALTER TABLE messages ADD COLUMN tokens_per_s REAL",
    "ALTER TABLE messages ADD COLUMN steps INTEGER",
    "ALTER TABLE messages ADD COLUMN accepted_by_drafter TEXT",
    "ALTER TABLE messages ADD COLUMN finish_reason TEXT",
    "ALTER TABLE messages ADD COLUMN stats TEXT",
    "ALTER TABLE chats ADD COLUMN source TEXT",
    "CREATE UNIQUE INDEX chats_source ON chats(source) WHERE source IS NOT NULL",
    "CREATE INDEX chats_updated ON chats(updated_at)",
    "ALTER TABLE documents ADD COLUMN corpus TEXT",
    "CREATE INDEX documents_corpus ON documents(corpus)",
    """CREATE TABLE indexes (
        fingerprint TEXT PRIMARY KEY,
        separator INTEGER NOT NULL,
        model TEXT,
        updated_at REAL NOT NULL
    )""",
]
_OLD = [_OLD_V1, _OLD_V2, _OLD_V3]


def _old_database(path: Path, version: int) -> None:
    """A database as the old SQL migrations left it at `version`, with rows from every era."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version "
        "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    for n, statements in enumerate(_OLD[:version], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, ?)", (n, float(n)))
        if n == 1:
            conn.execute("INSERT INTO chats VALUES (1, 'old chat', 'm', NULL, 1.0, 2.0)")
            conn.executemany(
                "INSERT INTO messages (id, chat_id, parent_id, role, content, created_at)"
                " VALUES (?, 1, ?, ?, ?, 1.0)",
                [(1, None, "user", "ancient questions"), (2, 1, "assistant", "an old answer")],
            )
            conn.execute(
                "INSERT INTO documents VALUES (1, '/old.txt', 'Old', 'h1', 'text',"
                " 'an ancient document about warranties', 1.0, 7)"
            )
        if n == 3:
            conn.execute(
                "INSERT INTO chats (id, title, created_at, updated_at, source)"
                " VALUES (2, 'imported', 3.0, 3.0, 'chatgpt:x')"
            )
            conn.execute(
                "INSERT INTO messages (id, chat_id, role, content, created_at, steps, stats)"
                " VALUES (3, 2, 'user', 'a recent question', 3.0, 4, '{}')"
            )
    conn.commit()
    conn.close()


def _schema(conn: sqlite3.Connection) -> dict[str, Any]:
    """What the store depends on, without the SQL text (quoting and layout differ)."""
    out: dict[str, Any] = {}
    names = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]
    for table in names:
        indexes = set()
        for _, index, unique, origin, partial in conn.execute(f"PRAGMA index_list('{table}')"):
            cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info('{index}')"))
            # An automatic index (a UNIQUE or PRIMARY KEY constraint) has no name of its own.
            indexes.add((index if origin == "c" else None, cols, unique, partial))
        out[table] = {
            "columns": [r[1:] for r in conn.execute(f"PRAGMA table_info('{table}')")],
            "foreign_keys": sorted(
                r[2:] for r in conn.execute(f"PRAGMA foreign_key_list('{table}')")
            ),
            "indexes": indexes,
        }
    out["triggers"] = sorted(
        r[0:2]
        for r in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = 'trigger'")
    )
    return out


def _normalise_unique(schema: dict[str, Any]) -> dict[str, Any]:
    """documents.content_hash: a UNIQUE column constraint then, a named unique index now."""
    indexes = schema["documents"]["indexes"]
    schema["documents"]["indexes"] = {
        (None, cols, unique, partial)
        if cols == ("content_hash",)
        else (name, cols, unique, partial)
        for name, cols, unique, partial in indexes
    }
    return schema


def _fts_in_step(conn: sqlite3.Connection) -> None:
    for fts in ("messages_fts", "documents_fts", "passages_fts"):
        conn.execute(f"INSERT INTO {fts}({fts}, rank) VALUES ('integrity-check', 1)")
    conn.commit()  # the check is an INSERT: end the transaction sqlite3 opened for it


@pytest.mark.parametrize("version", [1, 2, 3])
def test_old_sql_database_upgrades_to_the_same_schema(tmp_path: Path, version: int) -> None:
    with Store.open(tmp_path / "fresh.db") as fresh:
        expected = _normalise_unique(_schema(fresh.conn))
    path = tmp_path / "old.db"
    _old_database(path, version)
    with Store.open(path) as store:
        conn = store.conn
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
        assert versions == list(range(1, LATEST + 1))
        assert _normalise_unique(_schema(conn)) == expected
        _fts_in_step(conn)
        # Every row is kept, full-text search covers them (porter: "question" finds "questions").
        assert store.counts() == {
            "chats": 1 + (version == 3),
            "messages": 2 + (version == 3),
            "documents": 1,
        }
        assert [m.content for m in store.thread(1)] == ["ancient questions", "an old answer"]
        assert {(h.kind, h.id) for h in store.search("question ancient")} == {("message", 1)}
        assert {(h.kind, h.id) for h in store.search("warranty")} == {("document", 1)}
        # v4 split the old document into passages that retrieval finds.
        assert [(h.document_id, h.text) for h in store.search_passages(["warranties"], 3)] == [
            (1, "an ancient document about warranties")
        ]
        # The constraints and triggers behave the same.
        with pytest.raises(sqlite3.IntegrityError), store.transaction():
            conn.execute(
                "INSERT INTO messages (chat_id, role, content, created_at)"
                " VALUES (1, 'robot', 'x', 1.0)"
            )
        assert (
            store.add_document(
                "/again.txt", "Again", "an ancient document about warranties", "text", digest="h1"
            )
            is None
        )
        store.add_message(1, "user", "fresh words", 2)
        store.rename_chat(1, "renamed")
        with store.transaction():
            conn.execute("UPDATE messages SET content = 'edited words' WHERE id = 2")
        assert [h.id for h in store.search("edited")] == [2] and not store.search("old answer")
        store.delete_chat(1)  # ON DELETE CASCADE: its messages go, and leave the index
        assert not store.search("ancient question") and not store.search("fresh")
        _fts_in_step(conn)
        assert not conn.in_transaction  # everything above was committed
        if version == 3:
            assert store.chat_by_source("chatgpt:x") is not None
            assert store.conn.execute("SELECT steps FROM messages WHERE id = 3").fetchone() == (4,)


def test_a_migration_can_transform_a_table_others_reference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """table.transform() rebuilds a table (drop + rename): with foreign keys on, dropping chats
    would cascade into messages. The runner turns them off for the step, checks, turns back on."""
    from samchat.store import migrations

    path = tmp_path / "samchat.db"
    _old_database(path, 3)

    def m_next_reorder_chats(db: Database) -> None:
        db.table("chats").transform(column_order=["id", "title", "source"])

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, m_next_reorder_chats])
    with Store.open(path) as store:
        assert current_version(store.conn) == LATEST + 1
        assert [r[1] for r in store.conn.execute("PRAGMA table_info(chats)")][:3] == [
            "id",
            "title",
            "source",
        ]
        assert store.counts()["messages"] == 3
        assert store.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        store.delete_chat(1)  # the cascade still works on the rebuilt table
        assert store.counts()["messages"] == 1


def test_a_migration_that_breaks_foreign_keys_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from samchat.errors import StoreError
    from samchat.store import migrations

    path = tmp_path / "samchat.db"
    _old_database(path, 3)

    def m_next_orphans(db: Database) -> None:
        db.execute("DELETE FROM chats WHERE id = 1")  # foreign keys are off: no cascade

    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, m_next_orphans])
    broken = rf"version {LATEST + 1} would break links.*stays at version {LATEST}"
    with pytest.raises(StoreError, match=broken):
        Store.open(path)
    conn = sqlite3.connect(path)
    assert current_version(conn) == LATEST
    assert conn.execute("SELECT COUNT(*) FROM chats").fetchone()[0] == 2
    conn.close()


def test_opening_an_up_to_date_database_does_not_import_sqlite_utils(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    Store.open(path).close()
    code = (
        "import sys; from pathlib import Path; import samchat.store as s; "
        "imported = 'sqlite_utils' in sys.modules; st = s.Store.open(Path(sys.argv[1])); "
        "opened = 'sqlite_utils' in sys.modules; st.search('x'); "
        "print(imported, opened, 'sqlite_utils' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True
    )
    # Only full-text search (quoting the query) needs it.
    assert result.stdout.split() == ["False", "False", "True"]
