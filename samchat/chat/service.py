"""The turns of a chat, the same for every front end: send a question, regenerate a reply, edit
a question (a new branch), switch branches, and save each reply through the one write path.

`ChatService` holds the store side and runs on the thread that owns the store connection (the
TUI's UI thread, `samchat ask`'s only thread). `stream_reply` is the model side: it touches no
store, so the TUI runs it in a worker and posts its events back to the UI.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.store.titles import chat_title

if TYPE_CHECKING:
    import threading

    from samchat.chat.generator import Replies
    from samchat.chat.record import StoredStats
    from samchat.decoding.events import Event
    from samchat.decoding.params import SamplingParams
    from samchat.figures import SourceRef
    from samchat.store import Store


@dataclass
class PendingReply:
    """A reply to be generated: which question it answers and what the model is given."""

    chat_id: int | None  # None: nothing is saved (a new chat with saving off)
    parent_id: int | None  # the question's message id (None: not saved)
    messages: list[Message]  # system prompt?, the branch so far, the question
    model: str
    sources: tuple[SourceRef, ...] = ()  # put before the question


@dataclass(frozen=True)
class ReplyRecord:
    """A finished reply as it is stored: text, finish reason and the record (figures,
    provenance, notice, sources, speed trace) from samchat.chat.record."""

    text: str
    finish_reason: str
    stats: StoredStats
    notice: str = ""


class ChatService:
    """Turns of a chat over the `Store`. With `save=False` nothing is written (questions and
    replies get no ids), but an existing chat is still read for its history."""

    def __init__(self, store: Store, *, save: bool = True) -> None:
        self.store = store
        self.save = save

    def latest_leaf(self, chat_id: int) -> int | None:
        """The end of the chat's newest branch (None for an empty chat)."""
        thread = self.store.thread(chat_id)
        return thread[-1].id if thread else None

    def most_recent_chat(self) -> int | None:
        """The chat active most recently (None when there is none yet)."""
        chats = self.store.chats(limit=1)
        return chats[0].id if chats else None

    def history(
        self, chat_id: int | None, parent_id: int | None, system: str | None = None
    ) -> list[Message]:
        """What a question sent after `parent_id` follows: the system prompt (`system` replaces
        the chat's) and the branch up to `parent_id`. A missing chat is a SamchatError."""
        if chat_id is None:
            return [{"role": "system", "content": system}] if system else []
        chat = self.store.chat(chat_id)
        prompt = system if system is not None else chat.system_prompt
        out: list[Message] = [{"role": "system", "content": prompt}] if prompt else []
        if parent_id is not None:
            out += [m for m in self.store.conversation(chat_id, parent_id) if m["role"] != "system"]
        return out

    def send(
        self,
        question: str,
        *,
        chat_id: int | None,
        parent_id: int | None,
        model: str,
        content: str | None = None,
        system: str | None = None,
        sources: Sequence[SourceRef] = (),
        title: str | None = None,
    ) -> PendingReply:
        """Save the question (`content`: it with its sources, if any) after `parent_id`, in a new
        chat when `chat_id` is None, and return the reply to generate. `system` replaces the
        chat's system prompt; `title` names a new chat (default: from the question)."""
        content = question if content is None else content
        messages = [*self.history(chat_id, parent_id, system), {"role": "user", "content": content}]
        reply = PendingReply(chat_id, None, messages, model, tuple(sources))
        if not self.save:
            return reply
        store = self.store
        with store.transaction():
            if chat_id is None:
                chat_id = store.create_chat(title or chat_title(question), model, system)
            elif system is not None and system != store.chat(chat_id).system_prompt:
                store.set_system_prompt(chat_id, system or None)
            reply.chat_id = chat_id
            reply.parent_id = store.add_message(chat_id, "user", content, parent_id)
        return reply

    def regenerate(
        self,
        chat_id: int,
        question_id: int,
        *,
        model: str,
        sources: Sequence[SourceRef] = (),
    ) -> PendingReply:
        """Another reply to the question `question_id` (a sibling of its replies)."""
        return PendingReply(
            chat_id,
            question_id,
            self.store.conversation(chat_id, question_id),
            model,
            tuple(sources),
        )

    def edit(self, message_id: int, text: str, *, model: str) -> PendingReply:
        """`text` saved as a sibling of the question `message_id` (a new branch), to be answered."""
        original = self.store.message(message_id)
        new_id = self.store.add_message(original.chat_id, "user", text, original.parent_id)
        return self.regenerate(original.chat_id, new_id, model=model)

    def switch_branch(self, message_id: int, step: int) -> int | None:
        """The alternative `step` places away from `message_id` (wrapping); None if it has none."""
        return self.store.sibling(message_id, step)

    def finish(self, reply: PendingReply, record: ReplyRecord) -> int | None:
        """Save the finished reply under its question; its message id (None when not saved)."""
        if not self.save or reply.chat_id is None or reply.parent_id is None:
            return None
        from samchat.chat.record import save_reply

        return save_reply(
            self.store,
            reply.chat_id,
            reply.parent_id,
            record.text,
            model=reply.model,
            stats=record.stats,
            finish_reason=record.finish_reason,
        )


def stream_reply(
    generator: Replies,
    reply: PendingReply,
    sampling: SamplingParams,
    cancel: threading.Event,
    started: float | None = None,
) -> Iterator[Event | ReplyRecord]:
    """The decoder's events for `reply`, then its `ReplyRecord` (built from those events by
    samchat.chat.record). Touches no store: safe in a worker thread."""
    from samchat.chat.record import ReplyRecorder
    from samchat.decoding.events import ReplyDone

    recorder = ReplyRecorder(started, sources=reply.sources)
    for event in generator.generate(reply.messages, sampling, cancel):
        recorder.observe(event)
        yield event
        if isinstance(event, ReplyDone):
            yield ReplyRecord(event.text, event.finish_reason, recorder.stats(event), event.notice)
            return
    raise SamchatError("the decoder stopped without finishing the reply")
