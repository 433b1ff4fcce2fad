"""What the store's parts share: one connection and the file it opened, sqlite-utils over it,
transactions, the rows read back, and SQLite failures reported as one-line StoreErrors."""

from __future__ import annotations

import functools
import hashlib
import json
import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from samchat.figures import StoredStats
from samchat.store.connection import translate, write_transaction
from samchat.store.rows import MessageRow

if TYPE_CHECKING:
    import sqlite_utils

DB_NAME = "samchat.db"
ROLES = ("system", "user", "assistant")
# Roles whose text feeds the static index (system prompts are instructions, not content).
INDEXED_ROLES = ("user", "assistant")

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", bound="StoreBase")


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _guard(fn: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], R]:
    """Report SQLite failures as one-line StoreErrors instead of tracebacks."""

    def wrapper(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise translate(exc, self.path) from exc

    functools.update_wrapper(wrapper, fn)
    return wrapper


def _num(value: object, kind: type[int] | type[float]) -> int | float | None:
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


class StoreBase:
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

    def transaction(self) -> AbstractContextManager[None]:
        """Group several writes into one atomic transaction (nests as a savepoint)."""
        return write_transaction(self.conn)
