"""One write path: a reply stored by the TUI and by `samchat ask` is the same record (text,
figures, provenance, finish reason), built by samchat.chat.record from the engine's events."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tui_helpers import fixed_config, wait_for

from samchat.chat.service import ChatService, PendingReply, ReplyRecord
from samchat.cli import main
from samchat.decoding import ChatSession, DecodingConfig, ReplyDone, SamplingParams
from samchat.engines.costs import CostCurve
from samchat.store import Store
from samchat.tui.app import SamchatApp

pytestmark = pytest.mark.model

QUESTION = "Repeat after me: the quick brown fox jumps over the lazy dog."


async def test_tui_and_ask_store_the_same_record(
    make_app: Callable[..., SamchatApp],
    store: Store,
    default_lm: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import samchat.models

    # One real decode; both front ends then consume exactly these events, so any difference
    # in what they store comes from their own code, not from decoding timing.
    curve = CostCurve.default(default_lm.device_type)
    engine = ChatSession(default_lm, DecodingConfig(method="sam+tr"), cost_curve=curve)
    events = list(engine.generate([{"role": "user", "content": QUESTION}], SamplingParams(24)))
    done = events[-1]
    assert isinstance(done, ReplyDone)
    assert sum(n for n, _ in done.stats.provenance) == len(done.text) > 0
    assert {s for _, s in done.stats.provenance} - {"plain"}, "no drafted text to attribute"

    def replay(self: ChatSession, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from events

    monkeypatch.setattr(ChatSession, "generate", replay)
    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: default_lm)
    # Both front ends save their turn through the chat service.
    saved: list[int | None] = []
    finish = ChatService.finish

    def spy(self: ChatService, reply: PendingReply, record: ReplyRecord) -> int | None:
        saved.append(finish(self, reply, record))
        return saved[-1]

    monkeypatch.setattr(ChatService, "finish", spy)

    ask_dir = tmp_path / "ask-data"
    assert main(["ask", QUESTION, "--data-dir", str(ask_dir)]) == 0
    assert done.text in capsys.readouterr().out
    with Store.open(ask_dir / "samchat.db") as ask_store:
        [chat] = ask_store.chats()
        ask_reply = ask_store.thread(chat.id)[-1]
    assert saved == [ask_reply.id]

    cfg = fixed_config()
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=24)
    app = make_app(lm=default_lm, config=cfg, cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        app.chat.prompt.focus()
        app.chat.prompt.insert(QUESTION)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)
        assert app.chat.chat_id is not None
        tui_reply = store.thread(app.chat.chat_id)[-1]
        assert saved == [ask_reply.id, tui_reply.id]
        shown = app.chat.chat_view.views()[-1]
        # What the view shows is what it stored: text and per-drafter spans.
        assert shown.content == tui_reply.content
        runs = [[len(text), source] for text, source in shown.spans]
        assert tui_reply.stats is not None and runs == tui_reply.stats.to_dict()["provenance"]

    assert ask_reply.stats is not None and tui_reply.stats is not None
    for reply in (ask_reply, tui_reply):
        assert reply.role == "assistant" and reply.content == done.text
        assert reply.finish_reason == done.finish_reason
        assert reply.stats is not None and reply.stats.reply.tokens == done.stats.tokens
    # The speed trace is wall-clock (when each event arrived); everything else is the engine's.
    same = dataclasses.replace(ask_reply.stats, speed_trace=())
    assert same == dataclasses.replace(tui_reply.stats, speed_trace=())
    assert same.reply.provenance == done.stats.provenance
    assert len(ask_reply.stats.speed_trace) == len(tui_reply.stats.speed_trace) > 0
