"""The TUI chatting through a real `samchat serve` as a remote: the model screen offers the
configured endpoint's model, replies stream with "remote" figures, esc stops one at once and
keeps it, ctrl+r regenerates; a slow server never blocks the UI."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import OptionList, Static

from samchat.chat.config import load_config
from samchat.models.loader import ModelSpec
from samchat.store import Store
from samchat.tui.app import SamchatApp
from samchat.tui.screens.help import HelpScreen
from samchat.tui.screens.model import ModelScreen
from samchat.tui.themes import bundled_theme_dir
from tests.remote.conftest import KEY, write_config
from tests.remote.fake_servers import silent_port
from tests.serve.serve_process import Server
from tests.tui.tui_helpers import wait_for

pytestmark = pytest.mark.model


def rendered(app: SamchatApp, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


async def send(pilot: Any, app: SamchatApp, text: str) -> None:
    app.chat.prompt.focus()
    app.chat.prompt.insert(text)
    await pilot.press("enter")


def make_app(tmp_path: Path, config: Path, **kwargs: Any) -> SamchatApp:
    cfg = load_config(config)
    most = kwargs.pop("max_new_tokens", 400)
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=most, temperature=0.0)
    return SamchatApp(
        db_path=tmp_path / "samchat.db",
        config=cfg,
        config_path=config,
        theme_dirs=[bundled_theme_dir()],
        **kwargs,
    )


async def _chat(tmp_path: Path, server: Server) -> None:
    config = write_config(
        f'[endpoints.team]\nurl = "{server.base_url}"\napi_key_env = "TEAM_KEY"\n'
    )
    app = make_app(tmp_path, config, autoload_model=False)
    async with app.run_test(size=(120, 36)) as pilot:
        # The model screen lists the endpoint's model once the server has answered.
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelScreen))
        screen = app.screen
        options = screen.query_one("#model-list", OptionList)

        def offered() -> list[str]:
            return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]

        await wait_for(pilot, lambda: any("endpoint team" in o for o in offered()))
        label = next(o for o in offered() if "endpoint team" in o)
        assert label == "SmolLM2-135M-Instruct (endpoint team, remote)"
        options.focus()
        options.highlighted = offered().index(label)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.model_state == "ready", 60)
        assert app.lm is not None and app.lm.engine == "remote"
        status = rendered(app, "#status")
        assert f"model SmolLM2-135M-Instruct (remote, 127.0.0.1:{server.port})" in status
        assert "method" not in status  # the server decodes as it does
        assert app.cfg.model == "openai:team#SmolLM2-135M-Instruct"  # saved for next time

        # A long reply streams; esc stops it at once, and what came is kept.
        await send(pilot, app, "Write a long story about a lighthouse keeper.")
        await wait_for(
            pilot,
            lambda: (
                app.chat.conversation.replies.job is not None
                and app.chat.conversation.replies.job.live.tokens >= 3
            ),
        )
        bar = rendered(app, "#stats-text")
        assert "first token" in bar and "remote" in bar and "MAT" not in bar
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 30)
        chat = app.chat.chat_id
        assert chat is not None
        with Store.open(tmp_path / "samchat.db") as store:
            (stopped,) = [m for m in store.messages(chat) if m.role == "assistant"]
            assert stopped.finish_reason == "cancelled" and stopped.stats is not None
            assert 3 <= stopped.stats.reply.tokens < 400
            assert stopped.stats is not None and stopped.stats.reply.method == "remote"
            assert app.chat.chat_view.views()[-1].content == stopped.content

        # ctrl+r: another reply to the same question, a sibling branch.
        app.cfg.sampling = dataclasses.replace(app.cfg.sampling, max_new_tokens=8)
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.chat.replies_finished == 2, 60)
        with Store.open(tmp_path / "samchat.db") as store:
            first, second = [m for m in store.messages(chat) if m.role == "assistant"]
            assert first.parent_id == second.parent_id and second.finish_reason == "length"
            assert second.model == "SmolLM2-135M-Instruct" and second.content.strip()
        assert "remote" in rendered(app, "#stats-text")


def test_the_tui_chats_through_a_remote_server(
    samchat_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAM_KEY", KEY)
    asyncio.run(_chat(tmp_path, samchat_server))


async def _slow(tmp_path: Path, port: int) -> None:
    config = write_config(f'[endpoints.slow]\nurl = "http://127.0.0.1:{port}/v1"\ntimeout = 3\n')
    app = make_app(tmp_path, config, spec=ModelSpec(source="openai:slow"))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.model_state == "loading")
        await pilot.press("f1")  # the UI answers while the server says nothing
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), 2)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.model_state == "failed", 30)
        assert "model failed to load" in rendered(app, "#status")


def test_a_silent_server_never_freezes_the_tui(tmp_path: Path) -> None:
    with silent_port() as port:
        asyncio.run(_slow(tmp_path, port))


async def _quit_while_loading(tmp_path: Path, port: int) -> None:
    config = write_config(f'[endpoints.slow]\nurl = "http://127.0.0.1:{port}/v1"\ntimeout = 60\n')
    app = make_app(tmp_path, config, spec=ModelSpec(source="openai:slow"))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: app.model_state == "loading")
        await pilot.pause(0.3)  # the worker is now waiting on the silent server
        await pilot.press("ctrl+q")


def test_quitting_while_a_silent_server_is_asked_does_not_wait_for_it(tmp_path: Path) -> None:
    """The model list is asked on a private event loop that the worker abandons when the app
    closes: neither the app nor the process waits out the 60 s read timeout."""
    before = set(threading.enumerate())
    with silent_port() as port:
        started = time.monotonic()
        asyncio.run(_quit_while_loading(tmp_path, port))
        for thread in set(threading.enumerate()) - before:
            thread.join(timeout=10)
            assert not thread.is_alive(), f"{thread.name} still waits on the server"
        assert time.monotonic() - started < 15  # the app's own start and stop take a few
