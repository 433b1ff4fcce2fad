"""The store's imported documents, their corpora and their passages."""

from __future__ import annotations

import time

from samchat.errors import StoreError
from samchat.passages import split_passages
from samchat.store.base import (
    _DOC_COLS,
    _PASSAGE_COLS,
    StoreBase,
    _guard,
    content_hash,
)
from samchat.store.connection import write_transaction
from samchat.store.rows import DocumentRow, PassageHit


class Documents(StoreBase):
    """Documents (added with their passages), looked up, listed and deleted."""

    @_guard
    def add_document(
        self,
        source: str,
        title: str,
        text: str,
        kind: str,
        *,
        token_count: int | None = None,
        corpus: str | None = None,
        digest: str | None = None,
    ) -> int | None:
        """Store a document and its passages in one transaction; None if the same text is
        already stored."""
        digest = digest or content_hash(text)
        with write_transaction(self.conn):
            cur = self.conn.execute(
                "INSERT OR IGNORE INTO documents (source, title, content_hash, kind, text,"
                " imported_at, token_count, corpus) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (source, title, digest, kind, text, time.time(), token_count, corpus),
            )
            if cur.rowcount != 1 or not cur.lastrowid:
                return None
            doc_id = int(cur.lastrowid)
            self.conn.executemany(
                "INSERT INTO passages (document_id, seq, heading, text) VALUES (?, ?, ?, ?)",
                [(doc_id, i, c.heading, c.text) for i, c in enumerate(split_passages(text, kind))],
            )
        return doc_id

    @_guard
    def documents_at(self, source: str) -> list[int]:
        """Ids of the documents imported from this path (older versions of a re-imported file)."""
        rows = self.conn.execute("SELECT id FROM documents WHERE source = ? ORDER BY id", (source,))
        return [int(r[0]) for r in rows]

    @_guard
    def has_document_hash(self, digest: str) -> bool:
        found = self.conn.execute("SELECT 1 FROM documents WHERE content_hash = ?", (digest,))
        return found.fetchone() is not None

    @_guard
    def document(self, document_id: int) -> DocumentRow:
        row = self.conn.execute(
            f"SELECT {_DOC_COLS} FROM documents WHERE id = ?", (document_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"there is no document {document_id}")
        return DocumentRow(*row)

    @_guard
    def document_text(self, document_id: int) -> str:
        row = self.conn.execute("SELECT text FROM documents WHERE id = ?", (document_id,))
        found = row.fetchone()
        if found is None:
            raise StoreError(f"there is no document {document_id}")
        return str(found[0])

    @_guard
    def documents(self, corpus: str | None = None, limit: int | None = None) -> list[DocumentRow]:
        where, params = ("WHERE corpus = ?", [corpus]) if corpus else ("", [])
        rows = self.conn.execute(
            f"SELECT {_DOC_COLS} FROM documents {where} ORDER BY id LIMIT ?",
            [*params, -1 if limit is None else limit],
        )
        return [DocumentRow(*r) for r in rows]

    @_guard
    def delete_document(self, document_id: int) -> None:
        self.document(document_id)
        with write_transaction(self.conn):
            self.conn.execute("DELETE FROM documents WHERE id = ?", (document_id,))

    @_guard
    def delete_corpus(self, corpus: str) -> int:
        with write_transaction(self.conn):
            cur = self.conn.execute("DELETE FROM documents WHERE corpus = ?", (corpus,))
        return cur.rowcount

    @_guard
    def corpora(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT corpus, COUNT(*) FROM documents WHERE corpus IS NOT NULL GROUP BY corpus"
        )
        return {str(name): int(n) for name, n in rows}

    @_guard
    def set_token_count(self, document_id: int, token_count: int) -> None:
        with write_transaction(self.conn):
            self.conn.execute(
                "UPDATE documents SET token_count = ? WHERE id = ?", (token_count, document_id)
            )

    @_guard
    def passages(self, document_id: int) -> list[PassageHit]:
        """A document's passages in order."""
        rows = self.conn.execute(
            f"SELECT {_PASSAGE_COLS}, 0 FROM passages p JOIN documents d ON d.id = p.document_id"
            " WHERE p.document_id = ? ORDER BY p.seq",
            (document_id,),
        )
        return [PassageHit(*r) for r in rows]
