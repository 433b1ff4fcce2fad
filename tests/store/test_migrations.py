"""Migrations upgrade an older database in place, keeping its data."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from samchat.errors import StoreError
from samchat.store import Store
from samchat.store.migrations import LATEST, current_version, migrate


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
        assert store.message(1).accepted_by_drafter == {}
        m = store.add_message(1, "assistant", "new", 1, stats={"steps": 3, "mat": 1.5})
        assert store.message(m).steps == 3
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
    broken = [*migrations.MIGRATIONS[:2], ["ALTER TABLE chats ADD COLUMN x", "NOT SQL"]]
    monkeypatch.setattr(migrations, "MIGRATIONS", broken)
    conn = sqlite3.connect(path)
    with pytest.raises(sqlite3.Error):
        migrate(conn, target=3)
    assert current_version(conn) == 2  # v2 committed, v3 left no trace
    cols = [r[1] for r in conn.execute("PRAGMA table_info(chats)")]
    assert "x" not in cols
    conn.close()
