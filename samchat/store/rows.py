"""Plain records the store hands out (times are Unix seconds, UTC)."""

from __future__ import annotations

from dataclasses import dataclass

from samchat.figures import StoredStats


@dataclass(frozen=True)
class Chat:
    id: int
    title: str
    model: str | None
    system_prompt: str | None
    created_at: float
    updated_at: float
    message_count: int = 0
    source: str | None = None  # e.g. "chatgpt:<id>" for imported chats


@dataclass(frozen=True)
class MessageRow:
    id: int
    chat_id: int
    parent_id: int | None
    role: str
    content: str
    model: str | None
    created_at: float
    finish_reason: str | None = None
    stats: StoredStats | None = None  # a reply's record (None: a question, or none stored)


@dataclass(frozen=True)
class DocumentRow:
    id: int
    source: str
    title: str
    kind: str
    content_hash: str
    imported_at: float
    token_count: int | None
    corpus: str | None
    chars: int


@dataclass(frozen=True)
class SearchHit:
    kind: str  # "message" | "document"
    id: int  # message id or document id
    title: str  # chat title or document title
    snippet: str  # matched text with the hits between the marks given to search()
    rank: float  # bm25: lower is better
    chat_id: int | None = None  # for messages
    role: str | None = None  # for messages
    source: str | None = None  # for documents


@dataclass(frozen=True)
class PassageHit:
    """One passage of an imported document, as retrieval finds it."""

    id: int  # passage id
    document_id: int
    seq: int  # its place in the document, from 0
    heading: str  # the section it sits under ("" if none)
    text: str
    title: str  # the document's title
    source: str  # the document's path (or URL)
    rank: float  # bm25: lower is better
