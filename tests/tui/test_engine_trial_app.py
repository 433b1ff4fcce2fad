"""The app on a GGUF file with no engine record (the bundled model copied elsewhere): after the
first answer it measures the engines in the background, keeps the record and runs the next
reply on the engine measured fastest; a prompt sent meanwhile goes first, and quitting stops
the measurement at once."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tui_helpers import fixed_config, wait_for

from samchat.models.engine_choice import STEPS_ENV, kept
from samchat.models.engine_trial import Trial
from samchat.models.loader import ModelSpec
from samchat.store import Store
from samchat.tui.app import SamchatApp

pytestmark = pytest.mark.model

QUESTION = "Repeat after me: the quick brown fox jumps over the lazy dog."


def config(max_new_tokens: int) -> Any:
    cfg = fixed_config()
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=max_new_tokens)
    return cfg


def curve() -> Any:
    """A known cost curve: no timing of the machine follows a reply (it has tests of its own)."""
    from samchat.engines.costs import CostCurve

    return CostCurve.default("cpu")


def status(app: SamchatApp) -> str:
    return str(app.query_one("#status").render())


def replies(store: Store, chat_id: int | None) -> list[str]:
    assert chat_id is not None
    return [m.content for m in store.messages(chat_id) if m.role == "assistant"]


async def send(pilot: Any, app: SamchatApp, text: str) -> None:
    app.chat.prompt.focus()
    app.chat.prompt.insert(text)
    await pilot.press("enter")


@pytest.mark.parametrize("flat_faster", [False, True], ids=["as-measured", "flat-faster"])
async def test_the_engines_are_measured_after_the_first_answer_and_the_next_reply_takes_it(
    make_app: Callable[..., SamchatApp],
    store: Store,
    db_path: Path,
    tmp_path: Path,
    unmeasured_gguf: Path,
    gguf_lm: Any,
    monkeypatch: pytest.MonkeyPatch,
    flat_faster: bool,
) -> None:
    """flat-faster: the real measurement with llama.cpp's figure made a hundred times slower,
    so that the switch between replies is exercised whatever this machine measures."""
    monkeypatch.setenv(STEPS_ENV, "2")
    if flat_faster:
        from samchat.models import engine_trial

        real = engine_trial.time_steps

        def slower(*args: Any, **kwargs: Any) -> Any:
            speed = real(*args, **kwargs)
            if speed.engine != "llamacpp":
                return speed
            return dataclasses.replace(speed, ms_per_token=100 * speed.ms_per_token)

        monkeypatch.setattr(engine_trial, "time_steps", slower)
    cache, spec = tmp_path / "cache", ModelSpec(source=str(unmeasured_gguf))
    app = make_app(spec=spec, autoload_model=True, cache_dir=cache, config=config(12))
    app.cost_curve = curve()
    async with app.run_test(size=(200, 36)) as pilot:
        await wait_for(pilot, lambda: app.model_state == "ready", 180)
        assert app.lm is not None and app.lm.engine == "llamacpp"
        assert "[not measured yet: measuring after the first answer]" in status(app)
        await send(pilot, app, QUESTION)
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 120)
        replies_ = app.chat.conversation.replies
        await wait_for(pilot, lambda: kept(cache, spec) is not None and not replies_.measuring, 300)
        speeds = kept(cache, spec)
        assert speeds is not None and [s.label for s in speeds] == ["llamacpp", "flat/int4"]
        best = min(speeds, key=lambda s: s.ms_per_token)
        assert best.engine == "flat" or not flat_faster
        await wait_for(pilot, lambda: app.lm is not None and app.lm.engine == best.engine)
        await wait_for(pilot, lambda: f"[measured fastest here: {best.label} " in status(app))
        await send(pilot, app, "Say it once more.")
        await wait_for(pilot, lambda: app.chat.replies_finished == 2, 120)
        assert app.generator is not None and app.generator.lm.engine == best.engine
        first = replies(store, app.chat.chat_id)[0]
        await pilot.press("ctrl+q")
    # The same question in an app that measures nothing (the model given to it, as loaded):
    # the first answer is the one it would have been.
    other = make_app(lm=gguf_lm, config=config(12), db_path=db_path.with_name("other.db"))
    other.cost_curve = curve()
    async with other.run_test(size=(200, 36)) as pilot:
        await send(pilot, other, QUESTION)
        await wait_for(pilot, lambda: other.chat.replies_finished == 1, 120)
        assert not other.chat.conversation.replies.measuring
        assert other.data is not None
        assert replies(other.data, other.chat.chat_id) == [first]
        await pilot.press("ctrl+q")


async def test_a_prompt_sent_while_the_engines_are_measured_goes_first_and_quitting_stops_it(
    make_app: Callable[..., SamchatApp],
    store: Store,
    tmp_path: Path,
    unmeasured_gguf: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The measurement here would take many minutes (a huge number of steps): the second
    prompt is answered long before that, the measurement is abandoned (nothing kept) and
    starts again after that answer; quitting then ends it at once."""
    monkeypatch.setenv(STEPS_ENV, "1000000")
    ended: list[float] = []
    real = Trial.run

    def run(self: Trial, *args: Any) -> Any:  # the real measurement, its end noted
        try:
            return real(self, *args)
        finally:
            ended.append(time.perf_counter())

    monkeypatch.setattr(Trial, "run", run)
    cache, spec = tmp_path / "cache", ModelSpec(source=str(unmeasured_gguf))
    app = make_app(spec=spec, autoload_model=True, cache_dir=cache, config=config(8))
    app.cost_curve = curve()
    async with app.run_test(size=(200, 36)) as pilot:
        await wait_for(pilot, lambda: app.model_state == "ready", 180)
        await send(pilot, app, QUESTION)
        replies_ = app.chat.conversation.replies
        await wait_for(pilot, lambda: replies_.measuring.startswith("timing"), 180)
        assert "measuring the engines on this CPU" in status(app)
        sent = time.perf_counter()
        await send(pilot, app, "Say it once more.")
        await wait_for(pilot, lambda: app.chat.replies_finished == 2, 120)
        assert len(ended) == 1 and ended[0] - sent < 120  # abandoned for it
        assert kept(cache, spec) is None
        assert all(replies(store, app.chat.chat_id))
        await wait_for(pilot, lambda: replies_.measuring.startswith("timing"), 180)
        await pilot.press("ctrl+q")
    deadline = time.monotonic() + 10
    while len(ended) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(ended) == 2 and kept(cache, spec) is None
