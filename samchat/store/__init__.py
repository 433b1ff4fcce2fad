"""The SQLite store: chats, branching messages with reply stats, documents, full-text search."""

from samchat.store.recovery import RecoveryResult, TableSalvage, deep_check, recover
from samchat.store.rows import Chat, DocumentRow, MessageRow, SearchHit
from samchat.store.store import DB_NAME, Store, content_hash

__all__ = [
    "DB_NAME",
    "Chat",
    "DocumentRow",
    "MessageRow",
    "RecoveryResult",
    "SearchHit",
    "Store",
    "TableSalvage",
    "content_hash",
    "deep_check",
    "recover",
]
