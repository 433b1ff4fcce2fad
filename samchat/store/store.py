"""The SQLite store: chats with branching messages (chats.py), imported documents
(documents.py), full-text search (search.py), over one connection (base.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from samchat.errors import StoreError
from samchat.store.base import DB_NAME as DB_NAME
from samchat.store.base import INDEXED_ROLES as INDEXED_ROLES
from samchat.store.base import ROLES as ROLES
from samchat.store.base import _guard
from samchat.store.base import content_hash as content_hash
from samchat.store.chats import Chats
from samchat.store.connection import connect, translate
from samchat.store.documents import Documents
from samchat.store.migrations import migrate
from samchat.store.search import Search


class Store(Chats, Documents, Search):
    """One connection to the samchat database, by job: chats and messages, documents, search.
    Not shared between threads: open one per thread."""

    @classmethod
    def open(cls, path: Path) -> Store:
        """Open (creating if needed) the database at `path` (the front end resolves it: the
        data directory's DB_NAME) and bring its schema up to date."""
        try:
            conn = connect(path)
        except sqlite3.Error as exc:  # connect translates what it knows; be safe on every path
            raise StoreError(f"cannot open the database: {exc}") from exc
        try:
            migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise translate(exc, path) from exc
        except BaseException:  # a Ctrl-C too: closed, then re-raised
            conn.close()
            raise
        return cls(conn, path)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @_guard
    def counts(self) -> dict[str, int]:
        out = {}
        for table in ("chats", "messages", "documents"):
            out[table] = int(self.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        return out

    @_guard
    def integrity_check(self) -> str:
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])
