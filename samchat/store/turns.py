"""Saving a question and its reply as a chat turn: the write path of `samchat ask` and the TUI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from samchat.messages import Message
from samchat.store.store import Store

TITLE_CHARS = 60


def title_from(prompt: str) -> str:
    line = " ".join(prompt.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


@dataclass
class Turn:
    chat_id: int | None  # None when nothing is saved (--no-save on a new chat)
    user_message_id: int | None
    messages: list[Message]  # what to send to the model: system?, history, the question


def begin_turn(
    store: Store | None,
    prompt: str,
    *,
    chat_id: int | None = None,
    model: str | None = None,
    system: str | None = None,
    save: bool = True,
) -> Turn:
    """Start a turn: a new chat, or `chat_id` continued from the end of its latest branch. With
    `save`, the question is committed now, so a crash mid-reply keeps it. `system` replaces the
    chat's system prompt when continuing."""
    history: list[Message] = []
    parent: int | None = None
    if chat_id is not None:
        if store is None:
            raise ValueError("continuing a chat needs a store")
        chat = store.chat(chat_id)
        thread = store.thread(chat_id)
        parent = thread[-1].id if thread else None
        prompt_text = system if system is not None else chat.system_prompt
        if prompt_text:
            history.append({"role": "system", "content": prompt_text})
        history.extend({"role": m.role, "content": m.content} for m in thread)
        if save and system is not None and system != chat.system_prompt:
            store.set_system_prompt(chat_id, system)
    elif system:
        history.append({"role": "system", "content": system})
    messages = [*history, {"role": "user", "content": prompt}]
    if not save or store is None:
        return Turn(chat_id, None, messages)
    with store.transaction():
        if chat_id is None:
            chat_id = store.create_chat(title_from(prompt), model, system)
        user_id = store.add_message(chat_id, "user", prompt, parent, model=model)
    return Turn(chat_id, user_id, messages)


def finish_turn(
    store: Store | None,
    turn: Turn,
    reply: str,
    *,
    model: str | None = None,
    stats: dict[str, Any] | None = None,
    finish_reason: str | None = None,
) -> int | None:
    """Commit the reply under the question; returns its message id (None if not saved).
    `stats` is samchat.chat.record's record, as the TUI stores it too."""
    if store is None or turn.chat_id is None or turn.user_message_id is None:
        return None
    from samchat.chat.record import save_reply

    return save_reply(
        store,
        turn.chat_id,
        turn.user_message_id,
        reply,
        model=model,
        stats=stats,
        finish_reason=finish_reason,
    )
