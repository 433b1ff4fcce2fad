"""Searching the store (FTS5 over messages and passages) and what the static index is built from."""

from __future__ import annotations

import sqlite3
import time

from samchat.errors import StoreError
from samchat.store.base import (
    _PASSAGE_COLS,
    INDEXED_ROLES,
    StoreBase,
    _guard,
)
from samchat.store.connection import write_transaction
from samchat.store.rows import PassageHit, SearchHit


class Search(StoreBase):
    """Full-text search, passage statistics for BM25, and the static index's keys."""

    @_guard
    def passage_count(self) -> int:
        return int(self.conn.execute("SELECT COUNT(*) FROM passages").fetchone()[0])

    @_guard
    def passage_frequency(self, term: str) -> int:
        """How many passages hold `term` (a plain word, stemmed as the index stems it)."""
        match = '"' + term.replace('"', "") + '"'
        row = self.conn.execute(
            "SELECT COUNT(*) FROM passages_fts WHERE passages_fts MATCH ?", (match,)
        )
        return int(row.fetchone()[0])

    @_guard
    def search_passages(self, terms: list[str], limit: int) -> list[PassageHit]:
        """Passages matching any of `terms` (plain words), best BM25 first; a heading hit
        counts twice a body hit."""
        words = [t.replace('"', "") for t in terms]
        match = " OR ".join(f'"{w}"' for w in words if w.strip())
        if not match:
            return []
        rows = self.conn.execute(
            f"""SELECT {_PASSAGE_COLS}, r.rank FROM (
                    SELECT rowid, bm25(passages_fts, 2.0, 1.0) AS rank FROM passages_fts
                    WHERE passages_fts MATCH ? ORDER BY rank LIMIT ?) r
                JOIN passages p ON p.id = r.rowid JOIN documents d ON d.id = p.document_id
                ORDER BY r.rank""",
            (match, limit),
        )
        return [PassageHit(*r) for r in rows]

    @_guard
    def search(
        self,
        query: str,
        limit: int = 20,
        *,
        kinds: tuple[str, ...] = ("message", "document"),
        mark: tuple[str, str] = ("[", "]"),
        raw: bool = False,
    ) -> list[SearchHit]:
        """Full-text search, best matches first. The query is taken as plain words unless `raw`
        (then FTS5 syntax: AND/OR/NOT, "phrases", prefix*)."""
        if not query.strip():
            raise StoreError("the search query is empty")
        match = query if raw else self.db.quote_fts(query)
        hits: list[SearchHit] = []
        try:
            if "message" in kinds:
                rows = self.conn.execute(
                    """SELECT m.id, c.title, snippet(messages_fts, 0, ?, ?, '…', 16),
                              bm25(messages_fts), m.chat_id, m.role
                       FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
                       JOIN chats c ON c.id = m.chat_id
                       WHERE messages_fts MATCH ? ORDER BY bm25(messages_fts) LIMIT ?""",
                    (mark[0], mark[1], match, limit),
                )
                hits += [SearchHit("message", r[0], r[1], r[2], r[3], r[4], r[5]) for r in rows]
            if "document" in kinds:
                rows = self.conn.execute(
                    """SELECT d.id, d.title, snippet(documents_fts, 1, ?, ?, '…', 16),
                              bm25(documents_fts), d.source
                       FROM documents_fts JOIN documents d ON d.id = documents_fts.rowid
                       WHERE documents_fts MATCH ? ORDER BY bm25(documents_fts) LIMIT ?""",
                    (mark[0], mark[1], match, limit),
                )
                hits += [SearchHit("document", r[0], r[1], r[2], r[3], source=r[4]) for r in rows]
        except sqlite3.OperationalError as exc:
            if raw:  # FTS5 reports bad syntax as many different OperationalErrors
                raise StoreError(f"cannot parse the search query {query!r}: {exc}") from exc
            raise
        hits.sort(key=lambda h: h.rank)
        return hits[:limit]

    @_guard
    def index_keys(self) -> set[str]:
        """Keys of everything the static index should hold: doc:<id> and msg:<id>."""
        keys = {f"doc:{r[0]}" for r in self.conn.execute("SELECT id FROM documents")}
        roles = ", ".join(f"'{r}'" for r in INDEXED_ROLES)
        keys |= {
            f"msg:{r[0]}"
            for r in self.conn.execute(f"SELECT id FROM messages WHERE role IN ({roles})")
        }
        return keys

    @_guard
    def text_for_key(self, key: str) -> str | None:
        """The text behind an index key, or None if it is gone."""
        kind, _, num = key.partition(":")
        table = {"doc": "SELECT text FROM documents", "msg": "SELECT content FROM messages"}
        if kind not in table or not num.isdigit():
            return None
        row = self.conn.execute(f"{table[kind]} WHERE id = ?", (int(num),)).fetchone()
        return None if row is None else str(row[0])

    @_guard
    def register_index(self, fingerprint: str, separator: int, model: str | None) -> None:
        with write_transaction(self.conn):
            self.conn.execute(
                "INSERT INTO indexes (fingerprint, separator, model, updated_at)"
                " VALUES (?, ?, ?, ?) ON CONFLICT(fingerprint) DO UPDATE SET"
                " separator = excluded.separator, model = COALESCE(excluded.model, model),"
                " updated_at = excluded.updated_at",
                (fingerprint, separator, model, time.time()),
            )

    @_guard
    def indexes(self) -> list[tuple[str, int, str | None]]:
        """(fingerprint, separator, model) of every static index built so far."""
        rows = self.conn.execute("SELECT fingerprint, separator, model FROM indexes")
        return [(str(f), int(s), m) for f, s, m in rows]
