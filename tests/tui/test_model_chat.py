"""End-to-end TUI tests with the real default model (SmolLM2-135M-Instruct, offline)."""

from __future__ import annotations

import dataclasses
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Select, Static
from tui_helpers import fixed_config, wait_for

from samchat.store import Store
from samchat.tui.app import SamchatApp
from samchat.tui.screens.dialogs import EditorScreen
from samchat.tui.screens.help import HelpScreen
from samchat.tui.screens.model import ModelScreen

pytestmark = pytest.mark.model


def config(max_new_tokens: int, method: str = "sam+tr") -> Any:
    cfg = fixed_config()
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=max_new_tokens)
    cfg.decoding.method = method
    return cfg


@pytest.fixture
def curve(default_lm: Any) -> Any:
    """The engine's default cost curve: measuring one takes minutes on a busy 2-core CI box,
    and the curve only sizes drafts (the reply is the same either way)."""
    from samchat.engines.costs import CostCurve

    return CostCurve.default(default_lm.device_type)


def replies(store: Store, chat_id: int) -> list[Any]:
    return [m for m in store.messages(chat_id) if m.role == "assistant"]


async def send(pilot: Any, app: SamchatApp, text: str) -> None:
    app.chat.prompt.focus()
    app.chat.prompt.insert(text)
    await pilot.press("enter")


async def test_chat_reply_stats_and_stored_copy_agree(
    make_app: Callable[..., SamchatApp], store: Store, default_lm: Any, curve: Any
) -> None:
    app = make_app(lm=default_lm, config=config(24), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        question = "Repeat after me: the quick brown fox jumps over the lazy dog."
        await send(pilot, app, question)
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)
        assert app.chat.conversation.replies.job is None
        assert app.chat.chat_id is not None
        (stored,) = replies(store, app.chat.chat_id)
        view = app.chat.chat_view.views()[-1]
        live = app.chat.conversation.replies.last_live
        assert live is not None and live.final is not None
        # The reply on screen is the stored reply.
        assert view.content == stored.content and stored.content.strip()
        assert view.message_id == stored.id
        # Its statistics: the engine's figures, stored and shown, agree with what streamed.
        assert stored.stats is not None
        assert stored.stats.reply.tokens == live.final.tokens == live.tokens
        assert stored.finish_reason in ("eos", "length")
        assert stored.stats.reply.mat == pytest.approx(live.final.mat)
        assert stored.stats is not None and stored.stats.reply.method == "sam+tr"
        accepted = {k: v for k, v in stored.stats.reply.accepted_by_drafter.items() if v}
        assert accepted == live.by_source  # per-token sources of the streamed deltas
        bar = str(app.query_one("#stats-text", Static).render())
        assert f"{live.final.tokens_per_s:.1f}" in bar and f"{live.final.mat:.2f}" in bar
        figures = str(view.query_one(".msg-stats", Static).render())
        assert (
            f"{stored.stats.reply.tokens} tok" in figures
            and f"MAT {stored.stats.reply.mat:.2f}" in figures
        )
        # Provenance covers the reply exactly, and is stored with it.
        assert "".join(t for t, _ in view.spans) == stored.content
        assert sum(n for n, _ in stored.stats.reply.provenance) == len(stored.content)
        await pilot.press("f9")
        await pilot.pause()
        shown = view.query_one(".msg-provenance", Static)
        assert shown.styles.display == "block" and str(shown.render()) == stored.content
        # Lossless: plain greedy decoding of the same conversation gives the same text.
        from samchat.decoding import ChatSession, DecodingConfig, SamplingParams

        plain = ChatSession(default_lm, DecodingConfig(method="plain"))
        events = list(plain.generate([{"role": "user", "content": question}], SamplingParams(24)))
        assert events[-1].text == stored.content  # type: ignore[union-attr]


async def test_stop_keeps_the_partial_reply(
    make_app: Callable[..., SamchatApp], store: Store, default_lm: Any, curve: Any
) -> None:
    app = make_app(lm=default_lm, config=config(400), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        await send(pilot, app, "Write a long story about a lighthouse keeper.")
        await wait_for(
            pilot,
            lambda: (
                app.chat.conversation.replies.job is not None
                and app.chat.conversation.replies.job.live.tokens >= 3
            ),
            120,
        )
        assert "generating" in str(app.query_one("#status").render())
        # Streaming: the reply is on screen, and its live figures in the bar, before it ends.
        assert (
            app.chat.conversation.replies.job is not None
            and app.chat.conversation.replies.job.view.content.strip()
        )
        assert "streaming" in str(app.query_one("#stats-text", Static).render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 60)
        assert app.chat.chat_id is not None
        (stored,) = replies(store, app.chat.chat_id)
        assert stored.finish_reason == "cancelled"
        assert 3 <= (stored.stats.reply.tokens if stored.stats else 0) < 400
        assert app.chat.chat_view.views()[-1].content == stored.content


async def test_a_long_prompt_shows_its_reading_and_esc_stops_it(
    make_app: Callable[..., SamchatApp],
    store: Store,
    gguf_lm: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A prompt of several llama.cpp prefill pieces: the reply's view shows what is read, with
    a bar, before the first token; Esc stops the reading, the reply ends cancelled and empty,
    and the bar goes."""
    from textual.widgets import ProgressBar

    from samchat.engines.costs import CostCurve
    from samchat.engines.llamacpp.engine import LlamaCppEngine
    from tests.decoding.prompts import LONG_CONTEXT

    # The second piece waits until Esc is pressed: on a busy machine the whole prompt can be
    # read between two of the UI's frames, and the bar must be seen while reading goes on.
    gate = threading.Event()
    pieces: list[int] = []
    prefill = LlamaCppEngine.prefill

    def held(self: LlamaCppEngine, ids: list[int], logits: int = 0) -> Any:
        pieces.append(len(ids))
        if len(pieces) == 2:
            assert gate.wait(120), "Esc never came"
        return prefill(self, ids, logits)

    monkeypatch.setattr(LlamaCppEngine, "prefill", held)
    app = make_app(lm=gguf_lm, config=config(16), cost_curve=CostCurve.default("cpu"))
    async with app.run_test(size=(120, 36)) as pilot:
        text = "\n\n".join(LONG_CONTEXT)
        await send(pilot, app, text + "\n\nSummarise the text above.")

        def bar() -> ProgressBar | None:
            job = app.chat.conversation.replies.job
            return job.view.query_one(".msg-reading", ProgressBar) if job is not None else None

        def reading() -> bool:
            shown = bar()
            if shown is None or not shown.display or shown.total is None:
                return False
            return 0 < (shown.progress or 0) < shown.total

        try:
            await wait_for(pilot, reading, 120)
            assert app.chat.conversation.replies.job is not None
            view = app.chat.conversation.replies.job.view
            label = str(view.query_one(".msg-reading-label", Static).render())
            assert "tokens of the prompt" in label and "esc stops" in label
            shown = bar()
            assert shown is not None and shown.total is not None and shown.total > 2 * 256
            assert shown.progress == pieces[0]
            await pilot.press("escape")
        finally:
            gate.set()
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 60)
        assert app.chat.chat_id is not None
        (stored,) = replies(store, app.chat.chat_id)
        assert stored.finish_reason == "cancelled" and stored.content == ""
        assert not view.query_one(".msg-reading", ProgressBar).display
        assert len(pieces) == 2  # Esc read no piece after the one it met


async def test_regenerate_branches_and_edit_resends(
    make_app: Callable[..., SamchatApp], store: Store, default_lm: Any, curve: Any
) -> None:
    app = make_app(lm=default_lm, config=config(6), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        await send(pilot, app, "Name a colour.")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)
        chat = app.chat.chat_id
        assert chat is not None
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.chat.replies_finished == 2, 120)
        first, second = replies(store, chat)
        assert first.parent_id == second.parent_id  # siblings: a new branch
        views = app.chat.chat_view.views()
        assert len(views) == 2 and views[-1].message_id == second.id
        assert views[-1].branch == (2, 2)
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: app.chat.chat_view.views()[-1].message_id == first.id)
        # Edit the question: a new user branch with its own reply.
        app.chat.chat_view.views()[0].focus()
        await pilot.press("f4")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        app.screen.query_one("#dialog-editor").text = "Name a fruit."  # type: ignore[attr-defined]
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: app.chat.replies_finished == 3, 120)
        users = [m for m in store.messages(chat) if m.role == "user"]
        assert [u.content for u in users] == ["Name a colour.", "Name a fruit."]
        assert users[0].parent_id == users[1].parent_id is None
        views = app.chat.chat_view.views()
        assert [v.role for v in views] == ["user", "assistant"]
        assert views[0].content == "Name a fruit." and views[0].branch == (2, 2)
        assert views[1].message_id == replies(store, chat)[-1].id
        assert replies(store, chat)[-1].parent_id == users[1].id


async def test_model_loads_in_a_worker_while_the_ui_works(
    make_app: Callable[..., SamchatApp], store: Store, default_lm: Any, curve: Any
) -> None:
    """A prompt sent before any model is ready waits, visibly; picking the default model loads
    it in a worker (the UI keeps answering) and then the waiting prompt is answered."""
    app = make_app(config=config(4), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        assert app.lm is None and "no model loaded" in str(app.query_one("#status").render())
        await send(pilot, app, "Say hi.")
        await wait_for(pilot, lambda: app.chat.conversation.replies.pending is not None)
        assert "waits for the model" in str(app.query_one("#status").render())
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelScreen))
        await pilot.press("enter")  # empty source = the bundled default
        await wait_for(pilot, lambda: app.model_state != "none")
        await pilot.press("f1")  # the UI answers while the model loads
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 180)
        assert app.model_state == "ready" and app.lm is not None
        assert app.lm is not default_lm and app.lm.name == default_lm.name
        status = str(app.query_one("#status").render())
        assert f"model SmolLM2-135M-Instruct ({app.lm.engine} {app.lm.dtype}, cpu)" in status
        assert app.chat.chat_id is not None and len(replies(store, app.chat.chat_id)) == 1


COMMENTED_CONFIG = (
    '# my settings\ntheme = "ember"  # the warm one\n\n[sampling]\n# greedy\ntop_k = 0\n'
)


@pytest.mark.parametrize("text", [None, COMMENTED_CONFIG], ids=["no-config", "commented"])
async def test_opening_and_quitting_the_app_leaves_config_toml_as_it_was(
    make_app: Callable[..., SamchatApp],
    config_path: Path,
    tmp_path: Path,
    curve: Any,
    text: str | None,
) -> None:
    """The app decodes on the engine and format kept as measured fastest (flat/int4 here), and
    that resolved choice stays in the cache: the user's file is not written."""
    from samchat.models.default import bundled_gguf
    from samchat.models.engine_choice import EngineSpeed, keep

    cache = tmp_path / "cache"
    keep(
        cache,
        bundled_gguf(),
        [EngineSpeed("llamacpp", "auto", 9.0, "llama.cpp"), EngineSpeed("flat", "int4", 5.0, "")],
    )
    if text is not None:
        config_path.parent.mkdir(parents=True)
        config_path.write_text(text, encoding="utf-8")
    app = make_app(autoload_model=True, cache_dir=cache, cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.model_state == "ready", 180)
        assert app.lm is not None and (app.lm.engine, app.lm.dtype) == ("flat", "int4")
        await pilot.press("ctrl+q")
    if text is None:
        assert not config_path.exists()
    else:
        assert config_path.read_text(encoding="utf-8") == text


async def test_the_engine_picked_on_the_model_screen_runs_and_is_saved(
    make_app: Callable[..., SamchatApp], config_path: Path, curve: Any
) -> None:
    app = make_app(config=config(4), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        picks = (("torch", ("float32", "bfloat16")), ("flat", ("int4",)), ("llamacpp", ("Q4_1",)))
        for engine, types in picks:
            await pilot.press("ctrl+l")
            await wait_for(pilot, lambda: isinstance(app.screen, ModelScreen))
            app.screen.query_one("#model-engine", Select).value = engine
            await pilot.press("enter")  # empty source = the bundled default
            await wait_for(pilot, lambda e=engine: app.lm is not None and app.lm.engine == e, 180)
            assert app.lm is not None and app.lm.dtype in types  # torch: --dtype auto's pick
            status = str(app.query_one("#status").render())
            assert f"model SmolLM2-135M-Instruct ({engine} {app.lm.dtype}, cpu)" in status
            assert app.cfg.engine == engine
            assert tomllib.loads(config_path.read_text())["engine"] == engine
        # The screen opens on the engine in use.
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelScreen))
        await pilot.pause()
        assert app.screen.query_one("#model-engine", Select).value == "llamacpp"
        await pilot.press("escape")


async def test_a_failed_reply_is_a_notice_and_the_chat_goes_on(
    make_app: Callable[..., SamchatApp], store: Store, default_lm: Any, curve: Any
) -> None:
    app = make_app(lm=default_lm, config=config(4), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        await send(pilot, app, "word " * 9000)  # longer than the model's context
        await wait_for(
            pilot,
            lambda: app.chat.conversation.replies.job is None and app.chat.chat_id is not None,
            120,
        )
        await wait_for(pilot, lambda: len(app.chat.chat_view.views()) == 1, 30)
        assert any("too long" in n.message for n in app._notifications)
        assert app.chat.chat_id is not None and replies(store, app.chat.chat_id) == []
        # The app still answers the next prompt.
        await pilot.press("ctrl+n")
        await send(pilot, app, "Hi")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)


async def test_the_static_index_follows_the_store(
    make_app: Callable[..., SamchatApp], store: Store, default_lm: Any, curve: Any
) -> None:
    from tui_helpers import seed_chat

    old = seed_chat(store, "Earlier", [("What is a suffix automaton?", "An index of substrings.")])
    app = make_app(lm=default_lm, config=config(4), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        indexer = app.indexer
        assert indexer is not None
        await wait_for(pilot, lambda: indexer.ready.is_set(), 60)
        keys = {f"msg:{m.id}" for m in store.messages(old)}
        await wait_for(pilot, lambda: keys <= indexer.index.document_ids(), 60)
        await send(pilot, app, "Hello")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)
        assert app.chat.chat_id is not None
        (reply,) = replies(store, app.chat.chat_id)
        # The finished reply pokes the indexer, which adds it for later drafting.
        await wait_for(pilot, lambda: f"msg:{reply.id}" in indexer.index.document_ids(), 60)
        await wait_for(pilot, lambda: "indexing" not in str(app.query_one("#status").render()))
        assert app.generator is not None and app.generator.session().static_index is not None


async def test_opening_another_chat_while_a_reply_streams(
    make_app: Callable[..., SamchatApp],
    store: Store,
    default_lm: Any,
    curve: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tui_helpers import seed_chat

    from samchat.chat.generator import Generator
    from samchat.decoding.events import TextDelta

    # The reply is held after its first tokens until the other chat is open: however fast
    # the machine, the switch happens mid-stream (a 40-token reply could otherwise finish
    # between two polls of the test).
    resume = threading.Event()
    real = Generator.generate

    def held(self: Generator, *args: Any) -> Iterator[Any]:
        for ev in real(self, *args):
            yield ev
            if isinstance(ev, TextDelta) and ev.token_ids:
                resume.wait(60)

    monkeypatch.setattr(Generator, "generate", held)
    other = seed_chat(store, "Other", [("q", "a")])
    app = make_app(lm=default_lm, config=config(40), cost_curve=curve)
    async with app.run_test(size=(120, 36)) as pilot:
        try:
            await send(pilot, app, "Count from one to twenty in words.")
            await wait_for(
                pilot,
                lambda: (
                    app.chat.conversation.replies.job is not None
                    and app.chat.conversation.replies.job.live.tokens >= 1
                ),
                120,
            )
            first = app.chat.chat_id
            assert first is not None
            await app.chat.open_chat(other)
            assert [v.content for v in app.chat.chat_view.views()] == ["q", "a"]
            assert app.chat.replies_finished == 0
        finally:
            resume.set()
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)
        assert app.chat.chat_id == other
        (reply,) = replies(store, first)  # stored in the chat it belongs to
        await app.chat.open_chat(first)
        assert app.chat.chat_view.views()[-1].content == reply.content


async def test_a_first_reply_does_not_wait_for_timing_the_machine(
    make_app: Callable[..., SamchatApp],
    store: Store,
    default_lm: Any,
    curve: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a machine whose costs are not measured yet, the first reply decodes plainly at once;
    the machine is timed after it (the status says so) and a prompt sent meanwhile waits, then
    drafts. The timing itself is stood in for (its measurement has tests of its own): here
    the machine is new, whatever this test run measured before."""
    from samchat.decoding.session import ChatSession
    from samchat.engines.torch.engine import TorchMeter

    monkeypatch.setattr(TorchMeter, "cached_cost_curve", lambda self: None)
    timed: list[float] = []
    release = threading.Event()

    def measure(self: ChatSession, cancelled: Callable[[], bool] | None = None) -> None:
        timed.append(time.perf_counter())
        release.wait(30)  # until the test has seen the waiting prompt
        self._planner.curve = curve
        self._planner.curve_missing = False

    monkeypatch.setattr(ChatSession, "measure_cost_curve", measure)
    app = make_app(lm=default_lm, config=config(8))  # no known curve
    async with app.run_test(size=(120, 36)) as pilot:
        await send(pilot, app, "Repeat: the quick brown fox.")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)
        assert app.chat.chat_id is not None
        (first,) = replies(store, app.chat.chat_id)
        assert first.stats is not None and first.stats.reply.accepted_by_drafter.get("dyn", 0) == 0
        assert first.stats.reply.mat == 1.0
        await wait_for(pilot, lambda: app.chat.conversation.replies.timing)
        assert "timing drafts on this CPU" in str(app.query_one("#status").render())
        await send(pilot, app, "Repeat it again: the quick brown fox.")
        await wait_for(pilot, lambda: app.chat.conversation.replies.pending is not None)
        assert "your prompt waits: timing drafts" in str(app.query_one("#status").render())
        release.set()
        await wait_for(pilot, lambda: app.chat.replies_finished == 2, 120)
        assert len(timed) == 1 and not app.chat.conversation.replies.timing
        second = replies(store, app.chat.chat_id)[-1]
        assert (
            second.stats is not None and second.stats.reply.steps < second.stats.reply.tokens
        )  # it drafted this time


async def test_esc_stops_timing_the_machine_and_the_waiting_prompt_goes_at_once(
    make_app: Callable[..., SamchatApp],
    store: Store,
    default_lm: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Esc while the machine is timed after a first reply stops the timing (nothing is kept:
    the next reply times it again), and a prompt that waited for it is answered at once,
    plainly. Closing the app stops the second timing the same way."""
    from samchat.decoding.session import ChatSession
    from samchat.engines.costs import MeasurementCancelled
    from samchat.engines.torch.engine import TorchMeter

    monkeypatch.setattr(TorchMeter, "cached_cost_curve", lambda self: None)
    started: list[float] = []
    stopped: list[float] = []

    def measure(self: ChatSession, cancelled: Callable[[], bool] | None = None) -> None:
        assert cancelled is not None
        started.append(time.perf_counter())
        while not cancelled():  # as the real measurement checks between its forwards
            time.sleep(0.005)
        stopped.append(time.perf_counter())
        raise MeasurementCancelled("the caller stopped it")

    monkeypatch.setattr(ChatSession, "measure_cost_curve", measure)
    app = make_app(lm=default_lm, config=config(8))  # no known curve
    async with app.run_test(size=(120, 36)) as pilot:
        await send(pilot, app, "Repeat: the quick brown fox.")
        await wait_for(pilot, lambda: app.chat.conversation.replies.timing, 120)
        await send(pilot, app, "Repeat it again: the quick brown fox.")
        await wait_for(pilot, lambda: app.chat.conversation.replies.pending is not None)
        assert "esc answers now" in str(app.query_one("#status").render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.chat.replies_finished == 2, 120)
        assert app.chat.chat_id is not None
        first, second = replies(store, app.chat.chat_id)
        assert first.content.strip() and second.content.strip()
        assert second.stats is not None and second.stats.reply.mat == 1.0  # at once, plainly
        assert len(stopped) == 1  # the first timing stopped; the second one runs now
        await wait_for(pilot, lambda: len(started) == 2)
    deadline = time.monotonic() + 10  # closing the app stopped it too (its thread ends soon)
    while len(stopped) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(stopped) == 2
