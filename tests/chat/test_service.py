"""The chat service: send, regenerate, edit (a branch), switch branches, each reply saved through
the one write path. A real SQLite file; the real default model where a reply is generated."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from samchat.chat.generator import Generator
from samchat.chat.service import ChatService, PendingReply, ReplyRecord, stream_reply
from samchat.decoding.events import ReplyDone, TextDelta
from samchat.decoding.params import DecodingConfig, SamplingParams
from samchat.errors import SamchatError
from samchat.store import Store
from tests.fakes import stored_stats

SAMPLING = SamplingParams(max_new_tokens=6, temperature=0.0)


@pytest.fixture
def service(tmp_path: Path) -> Any:
    store = Store.open(tmp_path / "samchat.db")
    yield ChatService(store)
    store.close()


@pytest.fixture
def generator(default_lm: Any) -> Generator:
    from samchat.engines.costs import CostCurve

    # A known cost curve: measuring one is slow and it only sizes drafts.
    return Generator(
        default_lm,
        DecodingConfig(method="sam+tr"),
        cost_curve=CostCurve.default(default_lm.device_type),
    )


def answer(service: ChatService, generator: Generator, reply: PendingReply) -> tuple[int, Any]:
    """Generate `reply`, save it; (its message id, the events streamed before the record)."""
    events = list(stream_reply(generator, reply, SAMPLING, threading.Event()))
    record = events[-1]
    assert isinstance(record, ReplyRecord)
    reply_id = service.finish(reply, record)
    assert reply_id is not None
    return reply_id, events[:-1]


@pytest.mark.model
def test_send_regenerate_edit_and_switch_branches(
    service: ChatService, generator: Generator, default_lm: Any
) -> None:
    store = service.store
    first = service.send("Name a colour.", chat_id=None, parent_id=None, model=default_lm.name,
                         system="Be brief.")  # fmt: skip
    assert first.chat_id is not None and first.parent_id is not None
    assert first.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Name a colour."},
    ]
    chat_id = first.chat_id
    reply_id, events = answer(service, generator, first)
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    [done] = [e for e in events if isinstance(e, ReplyDone)]
    stored = store.message(reply_id)
    # What was streamed is what is stored, with the engine's record.
    assert stored.content == streamed == done.text
    assert stored.parent_id == first.parent_id and stored.model == default_lm.name
    assert stored.finish_reason == done.finish_reason
    assert stored.stats is not None and stored.stats.reply.provenance == done.stats.provenance
    assert stored.stats.finish_reason == done.finish_reason and stored.stats.speed_trace

    # The next question follows the reply, with the branch as its history.
    second = service.send("Another.", chat_id=chat_id, parent_id=reply_id, model=default_lm.name)
    assert second.chat_id == chat_id
    assert [m["content"] for m in second.messages] == [
        "Be brief.", "Name a colour.", stored.content, "Another.",
    ]  # fmt: skip
    second_reply, _ = answer(service, generator, second)
    assert service.latest_leaf(chat_id) == second_reply

    # Regenerating answers the same question again: a sibling of the first reply.
    again = service.regenerate(chat_id, first.parent_id, model=default_lm.name)
    assert again.messages == first.messages
    other_reply, _ = answer(service, generator, again)
    assert [m.id for m in store.siblings(reply_id)] == [reply_id, other_reply]
    assert service.switch_branch(reply_id, 1) == other_reply
    assert service.switch_branch(other_reply, 1) == reply_id  # wraps
    assert service.switch_branch(first.parent_id, 1) is None  # the question has no sibling

    # Editing the first question makes a new branch from the chat's start.
    edited = service.edit(first.parent_id, "Name a fruit.", model=default_lm.name)
    assert edited.chat_id == chat_id and edited.parent_id is not None
    assert edited.messages[-1] == {"role": "user", "content": "Name a fruit."}
    assert len(edited.messages) == 2  # the system prompt and the new question only
    assert service.switch_branch(edited.parent_id, -1) == first.parent_id
    edited_reply, _ = answer(service, generator, edited)
    assert [m.id for m in store.thread(chat_id)] == [edited.parent_id, edited_reply]
    assert store.message(edited_reply).parent_id == edited.parent_id
    # The old branch is still there, whole.
    old = [m.id for m in store.thread(chat_id, second_reply)]
    assert old == [first.parent_id, reply_id, second.parent_id, second_reply]


def test_saving_off_writes_nothing_but_reads_the_chat(service: ChatService) -> None:
    store = service.store
    chat_id = store.create_chat("Kept", "m", "Sys")
    question = store.add_message(chat_id, "user", "Hi", None)
    reader = ChatService(service.store, save=False)
    assert reader.most_recent_chat() == chat_id
    reply = reader.send("Next", chat_id=chat_id, parent_id=question, model="m", system="New")
    assert (reply.chat_id, reply.parent_id) == (chat_id, None)
    assert reply.messages == [
        {"role": "system", "content": "New"},
        {"role": "user", "content": "Hi"},
        {"role": "user", "content": "Next"},
    ]
    assert reader.finish(reply, ReplyRecord("x", "eos", stored_stats(finish_reason="eos"))) is None
    fresh = reader.send("Alone", chat_id=None, parent_id=None, model="m")
    assert (fresh.chat_id, fresh.parent_id) == (None, None)
    assert store.counts()["messages"] == 1 and store.chat(chat_id).system_prompt == "Sys"


def test_a_missing_chat_is_a_one_line_error(service: ChatService) -> None:
    assert service.most_recent_chat() is None
    with pytest.raises(SamchatError, match="there is no chat 5"):
        service.send("Hi", chat_id=5, parent_id=None, model="m")
    assert service.store.counts()["chats"] == 0


def test_a_new_chat_is_named_by_its_question_on_one_line(service: ChatService) -> None:
    """One title rule for the app, `ask` and the server (all save through here or chat_title):
    whitespace folded, cut to TITLE_CHARS with an ellipsis."""
    from samchat.store.titles import TITLE_CHARS, chat_title

    short = service.send("What is\n a  suffix automaton?", chat_id=None, parent_id=None, model="m")
    question = "why " * 40
    long = service.send(question, chat_id=None, parent_id=None, model="m")
    store = service.store
    assert store.chat(short.chat_id or 0).title == "What is a suffix automaton?"
    title = store.chat(long.chat_id or 0).title
    assert title == chat_title(question) and len(title) == TITLE_CHARS and title.endswith("…")
    assert title.startswith("why why") and "  " not in title
