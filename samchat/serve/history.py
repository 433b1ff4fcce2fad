"""`samchat serve --save`: served conversations stored in the history, as the TUI stores them.

OpenAI clients resend the whole conversation each turn. A request whose messages extend a
conversation this server saved (up to and including the reply it gave) continues that chat;
any other request starts a new one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.messages import Message

if TYPE_CHECKING:
    from samchat.chat.record import StoredStats
    from samchat.decoding.events import ReplyDone
    from samchat.store import Store


def _key(messages: list[Message]) -> str:
    # Clients may trim the reply they send back; whitespace at the ends does not tell turns apart.
    plain = [[m["role"], m["content"].strip()] for m in messages]
    return hashlib.sha256(json.dumps(plain).encode()).hexdigest()


class History:
    """Saves replies and their conversations; used from the engine thread only (its store
    connection is opened there, on the first save)."""

    def __init__(self, db_path: Path, model: str, on_saved: Callable[[], None]) -> None:
        self.db_path = db_path
        self.model = model
        self.on_saved = on_saved  # e.g. the indexer's poke: saved chats grow the static index
        self._store: Store | None = None
        self._known: dict[str, tuple[int, int]] = {}  # conversation -> (chat id, reply id)

    def _open(self) -> Store:
        if self._store is None:
            from samchat.store import Store

            self._store = Store.open(self.db_path)
        return self._store

    def save(self, messages: list[Message], done: ReplyDone, stats: StoredStats | None) -> int:
        from samchat.chat.record import save_reply
        from samchat.store.titles import chat_title

        store = self._open()
        last_reply = max(
            (i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1
        )
        found = self._known.get(_key(messages[: last_reply + 1])) if last_reply >= 0 else None
        with store.transaction():
            if found is not None:
                chat_id, parent = found
                new = messages[last_reply + 1 :]
            else:
                head = 0
                while messages[head]["role"] == "system":
                    head += 1
                system = "\n\n".join(m["content"] for m in messages[:head]) or None
                new = messages[head:]
                first = next(m["content"] for m in new if m["role"] == "user")
                chat_id = store.create_chat(chat_title(first), self.model, system)
                parent = None
            for m in new:
                parent = store.add_message(chat_id, m["role"], m["content"], parent)
            assert parent is not None  # the last message is the user's (protocol.parse_messages)
            reply_id = save_reply(
                store,
                chat_id,
                parent,
                done.text,
                model=self.model,
                stats=stats,
                finish_reason=done.finish_reason,
            )
        self._known[_key([*messages, {"role": "assistant", "content": done.text}])] = (
            chat_id,
            reply_id,
        )
        self.on_saved()
        return chat_id

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
