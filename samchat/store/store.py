"""The SQLite store: chats with branching messages, imported documents, full-text search."""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from samchat.errors import StoreError
from samchat.figures import StoredStats
from samchat.messages import Message
from samchat.passages import split_passages
from samchat.store.connection import connect, translate, write_transaction
from samchat.store.migrations import migrate
from samchat.store.rows import Chat, DocumentRow, MessageRow, PassageHit, SearchHit

if TYPE_CHECKING:
    import sqlite_utils

DB_NAME = "samchat.db"
ROLES = ("system", "user", "assistant")
# Roles whose text feeds the static index (system prompts are instructions, not content).
INDEXED_ROLES = ("user", "assistant")

P = ParamSpec("P")
R = TypeVar("R")


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _guard(fn: Callable[Concatenate[Store, P], R]) -> Callable[Concatenate[Store, P], R]:
    """Report SQLite failures as one-line StoreErrors instead of tracebacks."""

    def wrapper(self: Store, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    functools.update_wrapper(wrapper, fn)
    return wrapper


def _num(value: object, kind: type[int] | type[float]) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return kind(value)


_MESSAGE_COLS = (
    "id, chat_id, parent_id, role, content, model, created_at, tokens, seconds, tokens_per_s,"
    " steps, mat, speedup, accepted_by_drafter, finish_reason, stats"
)
_CHAT_COLS = (
    "c.id, c.title, c.model, c.system_prompt, c.created_at, c.updated_at,"
    " (SELECT COUNT(*) FROM messages m WHERE m.chat_id = c.id), c.source"
)
_PASSAGE_COLS = "p.id, p.document_id, p.seq, p.heading, p.text, d.title, d.source"
_DOC_COLS = "id, source, title, kind, content_hash, imported_at, token_count, corpus, length(text)"


def _json_dict(text: str | None) -> dict[str, Any]:
    """A stored JSON object; {} for none, or for damaged bytes that no longer parse (the
    message itself stays readable)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _message(row: sqlite3.Row | tuple[Any, ...]) -> MessageRow:
    return MessageRow(
        id=row[0],
        chat_id=row[1],
        parent_id=row[2],
        role=row[3],
        content=row[4],
        model=row[5],
        created_at=row[6],
        finish_reason=row[14],
        stats=StoredStats.parse(_json_dict(row[15])),
    )


class Store:
    """One connection to the samchat database. Not shared between threads: open one per thread."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    @functools.cached_property
    def db(self) -> sqlite_utils.Database:
        """sqlite-utils over the same connection, imported on first use: it takes longer to
        import than samchat takes to start."""
        import sqlite_utils

        return sqlite_utils.Database(self.conn, execute_plugins=False)

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

    def transaction(self) -> Any:
        """Group several writes into one atomic transaction (nests as a savepoint)."""
        return write_transaction(self.conn)

    # -- chats ---------------------------------------------------------------------------------

    @_guard
    def create_chat(
        self,
        title: str,
        model: str | None = None,
        system_prompt: str | None = None,
        *,
        source: str | None = None,
        created_at: float | None = None,
    ) -> int:
        now = created_at if created_at is not None else time.time()
        with write_transaction(self.conn):
            cur = self.conn.execute(
                "INSERT INTO chats (title, model, system_prompt, created_at, updated_at, source)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (title, model, system_prompt, now, now, source),
            )
        return int(cur.lastrowid or 0)

    @_guard
    def chat(self, chat_id: int) -> Chat:
        row = self.conn.execute(f"SELECT {_CHAT_COLS} FROM chats c WHERE c.id = ?", (chat_id,))
        found = row.fetchone()
        if found is None:
            raise StoreError(f"there is no chat {chat_id}; `samchat history` lists the chats")
        return Chat(*found)

    @_guard
    def chat_by_source(self, source: str) -> Chat | None:
        found = self.conn.execute(
            f"SELECT {_CHAT_COLS} FROM chats c WHERE c.source = ?", (source,)
        ).fetchone()
        return Chat(*found) if found else None

    @_guard
    def chats(self, limit: int | None = None, offset: int = 0) -> list[Chat]:
        """Chats, most recently active first."""
        rows = self.conn.execute(
            f"SELECT {_CHAT_COLS} FROM chats c ORDER BY c.updated_at DESC, c.id DESC"
            " LIMIT ? OFFSET ?",
            (-1 if limit is None else limit, offset),
        )
        return [Chat(*r) for r in rows]

    @_guard
    def rename_chat(self, chat_id: int, title: str) -> None:
        self.chat(chat_id)
        with write_transaction(self.conn):
            self.conn.execute("UPDATE chats SET title = ? WHERE id = ?", (title, chat_id))

    @_guard
    def set_system_prompt(self, chat_id: int, system_prompt: str | None) -> None:
        self.chat(chat_id)
        with write_transaction(self.conn):
            self.conn.execute(
                "UPDATE chats SET system_prompt = ? WHERE id = ?", (system_prompt, chat_id)
            )

    @_guard
    def delete_chat(self, chat_id: int) -> None:
        """Delete a chat and all its messages (the static index drops them on its next sync)."""
        self.chat(chat_id)
        with write_transaction(self.conn):
            self.conn.execute("DELETE FROM chats WHERE id = ?", (chat_id,))

    # -- messages ------------------------------------------------------------------------------

    @_guard
    def add_message(
        self,
        chat_id: int,
        role: str,
        content: str,
        parent_id: int | None,
        model: str | None = None,
        stats: StoredStats | None = None,
        *,
        finish_reason: str | None = None,
        created_at: float | None = None,
    ) -> int:
        """Append a message under `parent_id` (None = a new root). `stats`: a reply's record,
        kept as JSON (StoredStats.to_dict), its main figures also in columns."""
        if role not in ROLES:
            raise StoreError(f"unknown message role {role!r}; expected one of {', '.join(ROLES)}")
        if stats is not None and not isinstance(stats, StoredStats):
            raise TypeError(f"stats must be a StoredStats, not {type(stats).__name__}")
        figures = stats.reply if stats is not None else None
        now = created_at if created_at is not None else time.time()
        with write_transaction(self.conn):
            self.chat(chat_id)
            if parent_id is not None:
                parent = self.conn.execute(
                    "SELECT chat_id FROM messages WHERE id = ?", (parent_id,)
                ).fetchone()
                if parent is None or parent[0] != chat_id:
                    raise StoreError(f"message {parent_id} is not in chat {chat_id}")
            cur = self.conn.execute(
                "INSERT INTO messages (chat_id, parent_id, role, content, model, created_at,"
                " tokens, seconds, tokens_per_s, steps, mat, speedup, accepted_by_drafter,"
                " finish_reason, stats) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    chat_id,
                    parent_id,
                    role,
                    content,
                    model,
                    now,
                    _num(figures.tokens, int) if figures else None,
                    _num(figures.seconds, float) if figures else None,
                    _num(figures.tokens_per_s, float) if figures else None,
                    _num(figures.steps, int) if figures else None,
                    _num(figures.mat, float) if figures else None,
                    _num(figures.speedup_est, float) if figures else None,
                    json.dumps(figures.accepted_by_drafter) if figures else None,
                    finish_reason or (stats.finish_reason if stats else None),
                    json.dumps(stats.to_dict(), default=str) if stats else None,
                ),
            )
            self.conn.execute(
                "UPDATE chats SET updated_at = MAX(updated_at, ?) WHERE id = ?", (now, chat_id)
            )
        return int(cur.lastrowid or 0)

    @_guard
    def message(self, message_id: int) -> MessageRow:
        row = self.conn.execute(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE id = ?", (message_id,)
        ).fetchone()
        if row is None:
            raise StoreError(f"there is no message {message_id}")
        return _message(row)

    @_guard
    def messages(self, chat_id: int) -> list[MessageRow]:
        """Every message of a chat, all branches, oldest first."""
        rows = self.conn.execute(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE chat_id = ? ORDER BY id", (chat_id,)
        )
        return [_message(r) for r in rows]

    @_guard
    def children(self, message_id: int) -> list[MessageRow]:
        rows = self.conn.execute(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE parent_id = ? ORDER BY id", (message_id,)
        )
        return [_message(r) for r in rows]

    @_guard
    def siblings(self, message_id: int) -> list[MessageRow]:
        """The message and its alternatives (same parent), oldest first, for branch navigation."""
        me = self.message(message_id)
        rows = self.conn.execute(
            f"SELECT {_MESSAGE_COLS} FROM messages WHERE chat_id = ? AND parent_id IS ?"
            " ORDER BY id",
            (me.chat_id, me.parent_id),
        )
        return [_message(r) for r in rows]

    def sibling(self, message_id: int, step: int) -> int | None:
        """The id of the alternative `step` places away (wrapping), or None if there is none."""
        sibs = [s.id for s in self.siblings(message_id)]
        if len(sibs) < 2:
            return None
        return sibs[(sibs.index(message_id) + step) % len(sibs)]

    def branches(self, rows: list[MessageRow]) -> dict[int, tuple[int, int]]:
        """(index, count) among siblings for each message of `rows` (one chat's) that has
        alternatives. One query for the whole chat: a sibling lookup per message made long chats
        slow."""
        if not rows:
            return {}
        by_parent: dict[int | None, list[int]] = {}
        for message in self.messages(rows[0].chat_id):  # oldest first, as siblings()
            by_parent.setdefault(message.parent_id, []).append(message.id)
        out: dict[int, tuple[int, int]] = {}
        for row in rows:
            ids = by_parent.get(row.parent_id, [row.id])
            if len(ids) > 1 and row.id in ids:
                out[row.id] = (ids.index(row.id) + 1, len(ids))
        return out

    @_guard
    def thread(self, chat_id: int, leaf_id: int | None = None) -> list[MessageRow]:
        """The branch root..leaf. Without `leaf_id`, the branch of the newest message. If
        `leaf_id` has replies, the path goes on down through the newest reply at each step."""
        self.chat(chat_id)
        if leaf_id is None:
            row = self.conn.execute(
                "SELECT MAX(id) FROM messages WHERE chat_id = ?", (chat_id,)
            ).fetchone()
            if row[0] is None:
                return []
            leaf_id = int(row[0])
        rows = self.conn.execute(
            f"""WITH RECURSIVE up(mid, depth) AS (
                    SELECT id, 0 FROM messages WHERE id = ? AND chat_id = ?
                    UNION ALL
                    SELECT m.parent_id, up.depth + 1 FROM messages m JOIN up ON m.id = up.mid
                    WHERE m.parent_id IS NOT NULL)
                SELECT {_MESSAGE_COLS} FROM messages JOIN up ON messages.id = up.mid
                ORDER BY up.depth DESC""",
            (leaf_id, chat_id),
        )
        path = [_message(r) for r in rows]
        if not path:
            raise StoreError(f"message {leaf_id} is not in chat {chat_id}")
        while True:
            row = self.conn.execute(
                f"SELECT {_MESSAGE_COLS} FROM messages WHERE parent_id = ? ORDER BY id DESC"
                " LIMIT 1",
                (path[-1].id,),
            ).fetchone()
            if row is None:
                return path
            path.append(_message(row))

    def conversation(self, chat_id: int, leaf_id: int | None = None) -> list[Message]:
        """The branch as model messages, led by the chat's system prompt if it has one: from
        the root down to `leaf_id` and no further (what a reply to it follows, even when it has
        replies already); without `leaf_id`, the newest branch."""
        chat = self.chat(chat_id)
        out: list[Message] = []
        if chat.system_prompt:
            out.append({"role": "system", "content": chat.system_prompt})
        for row in self.thread(chat_id, leaf_id):
            out.append({"role": row.role, "content": row.content})
            if row.id == leaf_id:
                break
        return out

    # -- documents -----------------------------------------------------------------------------

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

    # -- passages ------------------------------------------------------------------------------

    @_guard
    def passages(self, document_id: int) -> list[PassageHit]:
        """A document's passages in order."""
        rows = self.conn.execute(
            f"SELECT {_PASSAGE_COLS}, 0 FROM passages p JOIN documents d ON d.id = p.document_id"
            " WHERE p.document_id = ? ORDER BY p.seq",
            (document_id,),
        )
        return [PassageHit(*r) for r in rows]

    @_guard
    def prefill_speed(self, model: str, recent: int = 20, least: int = 256) -> float | None:
        """Prompt tokens per second this machine read for `model`: the median over its `recent`
        latest replies that read at least `least` new prompt tokens (shorter reads are mostly
        fixed costs); None before there is one."""
        rows = self.conn.execute(
            "SELECT stats FROM messages WHERE role = 'assistant' AND model = ? "
            "AND stats LIKE '%prefill_s%' ORDER BY id DESC LIMIT ?",
            (model, recent * 5),
        ).fetchall()
        speeds: list[float] = []
        for (text,) in rows:
            stats = _json_dict(text)
            try:
                read = int(stats.get("prompt_tokens", 0)) - int(stats.get("reused_tokens", 0))
                seconds = float(stats.get("prefill_s", 0.0))
            except (TypeError, ValueError):
                continue
            if read >= least and seconds > 0:
                speeds.append(read / seconds)
            if len(speeds) >= recent:
                break
        return statistics.median(speeds) if speeds else None

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

    # -- search --------------------------------------------------------------------------------

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

    # -- what the static index is built from ---------------------------------------------------

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

    @_guard
    def counts(self) -> dict[str, int]:
        out = {}
        for table in ("chats", "messages", "documents"):
            out[table] = int(self.conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        return out

    @_guard
    def integrity_check(self) -> str:
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])
