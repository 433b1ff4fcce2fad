"""The store's chats and their branching messages (each reply with its figures)."""

from __future__ import annotations

import json
import statistics
import time

from samchat.errors import StoreError
from samchat.figures import StoredStats
from samchat.messages import Message
from samchat.store.base import (
    _CHAT_COLS,
    _MESSAGE_COLS,
    ROLES,
    StoreBase,
    _guard,
    _json_dict,
    _message,
    _num,
)
from samchat.store.connection import write_transaction
from samchat.store.rows import Chat, MessageRow


class Chats(StoreBase):
    """Chats, messages, branches and threads; the prompt speed replies measured."""

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
