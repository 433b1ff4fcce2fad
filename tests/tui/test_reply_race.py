"""A reply must not wait for the background indexer (issue: replies stalled for minutes in CI).

The indexer is held inside a flush on purpose, the way a large import or a first sync of many
chats holds it, and a prompt is sent meanwhile: the reply has to stream and finish anyway.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tui_helpers import fixed_config, seed_chat, wait_for

from samchat.sam.index import StaticIndex
from samchat.store import Store
from samchat.tui.app import SamchatApp

pytestmark = pytest.mark.model


class Gate:
    """Once armed, blocks StaticIndex.flush (called with the indexer's lock held) until
    opened."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.opened = threading.Event()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real = StaticIndex.flush

        def held_flush(index: StaticIndex) -> None:
            if self.armed.is_set():
                self.entered.set()
                self.opened.wait(120)
            real(index)

        monkeypatch.setattr(StaticIndex, "flush", held_flush)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    g = Gate()
    g.install(monkeypatch)
    yield g
    g.opened.set()  # never leave the indexer thread parked


async def test_a_reply_streams_while_the_indexer_is_busy(
    make_app: Callable[..., SamchatApp], store: Store, default_lm: Any, gate: Gate
) -> None:
    from samchat.engines.costs import CostCurve

    seed_chat(store, "Earlier", [("What is a suffix automaton?", "An index of substrings.")])
    cfg = fixed_config()
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=12)
    app = make_app(lm=default_lm, config=cfg, cost_curve=CostCurve.default(default_lm.device_type))
    async with app.run_test(size=(120, 36)) as pilot:
        indexer = app.indexer
        assert indexer is not None
        # The first sync: replies draft from the index from now on.
        await wait_for(pilot, indexer.ready.is_set, 60)
        await wait_for(pilot, lambda: indexer.idle.is_set(), 60)
        # A document arrives (as from an import) and the indexer is held inside its flush.
        gate.armed.set()
        doc = store.add_document("notes.txt", "Notes", "Suffix automata index substrings.", "text")
        app.poke_indexer()
        await wait_for(pilot, gate.entered.is_set, 60)
        app.chat.prompt.focus()
        app.chat.prompt.insert("Say hello.")
        await pilot.press("enter")
        # The whole reply streams and is stored while the indexer still holds its flush.
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 60)
        assert not gate.opened.is_set()
        assert app.generator is not None and app.generator.session().static_index is not None
        assert app.chat.chat_id is not None
        (reply,) = [m for m in store.messages(app.chat.chat_id) if m.role == "assistant"]
        assert reply.content.strip() and reply.finish_reason in ("eos", "length")
        # Let the indexer go on: it catches up with the store, the document and the new turn.
        gate.opened.set()
        await wait_for(pilot, lambda: f"msg:{reply.id}" in indexer.index.document_ids(), 60)
        assert f"doc:{doc}" in indexer.index.document_ids()
