"""Pilot tests of the screens: help, settings, themes, keymap, palette, import, model, errors."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.command import CommandPalette
from textual.widgets import Input, Log, Markdown, OptionList, ProgressBar, Select
from tui_helpers import fixed_config, seed_chat, wait_for

from samchat.errors import SamchatError
from samchat.models.loader import ModelSpec
from samchat.store import Store
from samchat.tui.app import SamchatApp
from samchat.tui.keys import ACTIONS
from samchat.tui.screens.dialogs import InputScreen
from samchat.tui.screens.help import HelpScreen
from samchat.tui.screens.import_documents import ImportScreen
from samchat.tui.screens.model import ModelScreen
from samchat.tui.screens.settings import SettingsScreen

ROOT = Path(__file__).resolve().parents[2]


async def type_path(pilot: Any, app: SamchatApp, path: Path) -> None:
    """Put a path in the focused input (typing 80 characters one by one takes seconds)."""
    focused = app.focused
    assert isinstance(focused, Input)
    focused.value = str(path)
    await pilot.pause()


def notices(app: SamchatApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_help_lists_every_action(make_app: Callable[..., SamchatApp]) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        source = app.screen.query_one("#help-text", Markdown).source
        for action, key, desc, _ in ACTIONS:
            assert f"| `{key}` | {desc} | `samchat.{action}` |" in source
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))


async def test_keymap_from_config_remaps_bindings(
    make_app: Callable[..., SamchatApp], config_path: Path
) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text('[keymap]\n"samchat.help" = "f10"\n')
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f1")  # no longer bound
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f10")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        source = app.screen.query_one("#help-text", Markdown).source
        assert "| `f10` | Help | `samchat.help` |" in source


async def test_command_palette_runs_actions(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    chat = seed_chat(store, "Palette", [("q", "a")])
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        titles = {c.title for c in app.get_system_commands(app.screen)}
        for _, _, desc, _ in ACTIONS:
            assert desc in titles or desc == "Theme"
        await app.chat.open_chat(chat)
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"Rename chat")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, InputScreen))


async def test_settings_are_validated_and_saved(
    make_app: Callable[..., SamchatApp], config_path: Path
) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        screen = app.screen
        screen.query_one("#set-method", Select).value = "sam"
        screen.query_one("#set-l_threshold", Input).value = "7"
        screen.query_one("#set-max_new_tokens", Input).value = "lots"
        await pilot.press("ctrl+s")  # bad number: refused with a notice, screen stays
        await pilot.pause()
        assert app.screen is screen
        assert any("max_new_tokens" in n for n in notices(app))
        screen.query_one("#set-max_new_tokens", Input).value = "64"
        screen.query_one("#set-temperature", Input).value = "0.7"
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen))
        assert app.cfg.decoding.method == "sam"
        saved = tomllib.loads(config_path.read_text())
        assert saved["decoding"]["method"] == "sam"
        assert saved["decoding"]["l_threshold"] == 7
        assert saved["sampling"]["max_new_tokens"] == 64
        assert saved["sampling"]["temperature"] == 0.7
        assert "method sam " in str(app.query_one("#status").render()) + " "


async def test_themes_load_switch_and_persist(
    make_app: Callable[..., SamchatApp], config_path: Path, user_theme_dir: Path
) -> None:
    (user_theme_dir / "mine.toml").write_text('name = "mine"\nprimary = "#ff0088"\ndark = false\n')
    (user_theme_dir / "broken.toml").write_text('name = "broken"\nprimary = "not a colour"\n')
    app = make_app()
    async with app.run_test() as pilot:
        ours = {"samchat-dark", "samchat-light", "ember", "aurora", "mine"}
        assert ours <= set(app.available_themes)
        assert not app.get_theme("samchat-light").dark  # type: ignore[union-attr]
        assert app.theme == "samchat-dark"
        assert any("broken.toml" in n for n in notices(app))
        app.theme = "samchat-light"
        await pilot.pause()
        assert tomllib.loads(config_path.read_text())["theme"] == "samchat-light"
    # The choice is read back on the next start.
    app = make_app()
    async with app.run_test() as pilot:
        assert app.theme == "samchat-light"
        await pilot.press("ctrl+t")  # the theme picker is the command palette
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"ember")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.theme == "ember")
        await wait_for(pilot, lambda: tomllib.loads(config_path.read_text())["theme"] == "ember")


async def test_bad_config_file_is_reported_not_fatal(
    make_app: Callable[..., SamchatApp], config_path: Path
) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text("theme = [unclosed\n")
    app = make_app()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert any("not valid TOML" in n for n in notices(app))
        assert app.theme == "samchat-dark"


async def test_unusable_database_is_a_notice_not_a_crash(
    make_app: Callable[..., SamchatApp], tmp_path: Path
) -> None:
    not_a_db = tmp_path / "garbage.db"
    not_a_db.write_bytes(b"this is not an sqlite file" * 100)
    app = make_app(db_path=not_a_db)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.data is None
        assert any("not saved" in n for n in notices(app))
        await pilot.press(*"hello", "enter")
        await pilot.pause()
        assert any("database is not open" in n for n in notices(app))
    assert not_a_db.read_bytes() == b"this is not an sqlite file" * 100


async def test_locked_database_write_is_a_notice(
    make_app: Callable[..., SamchatApp], store: Store, db_path: Path
) -> None:
    import sqlite3

    seed_chat(store, "Busy", [("q", "a")])
    app = make_app()
    async with app.run_test() as pilot:
        assert app.data is not None
        app.data.conn.execute("PRAGMA busy_timeout = 50")
        locker = sqlite3.connect(db_path, timeout=0.05)
        locker.execute("BEGIN EXCLUSIVE")
        try:
            await pilot.press(*"hello", "enter")
            await wait_for(pilot, lambda: any("lock" in n.lower() for n in notices(app)), 20)
            assert app.chat.chat_id is None or app.chat.conversation.replies.pending is None
        finally:
            locker.rollback()
            locker.close()


async def test_import_screen_imports_a_folder(
    make_app: Callable[..., SamchatApp], tmp_path: Path, store: Store
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Suffix automata\n\nThey recognise every substring.\n")
    (docs / "b.txt").write_text("Token recycling reuses candidate tokens.\n")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ImportScreen))
        screen = app.screen
        assert isinstance(screen, ImportScreen)
        await type_path(pilot, app, docs)
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.summary is not None, 30)
        assert screen.summary is not None and "imported 2 documents" in screen.summary
        bar = screen.query_one(ProgressBar)
        assert bar.total == bar.progress
        assert len(store.documents()) == 2
        hits = store.search("substring", kinds=("document",))
        assert hits and hits[0].kind == "document"


async def test_import_of_a_bad_path_is_a_notice(
    make_app: Callable[..., SamchatApp], tmp_path: Path
) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ImportScreen))
        screen = app.screen
        await type_path(pilot, app, tmp_path / "no-such-folder")
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("does not exist" in n for n in notices(app)), 30)
        log = screen.query_one(Log)
        assert any("failed" in line for line in log.lines)
        await pilot.press("escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ImportScreen))


async def test_model_that_fails_to_load_is_a_notice(
    make_app: Callable[..., SamchatApp], tmp_path: Path
) -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelScreen))
        await type_path(pilot, app, tmp_path / "missing.gguf")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.model_state == "failed", 60)
        assert any("does not exist" in n for n in notices(app))
        assert "failed to load" in str(app.query_one("#status").render())
        # The UI still works.
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))


async def test_model_screen_returns_the_chosen_engine(
    make_app: Callable[..., SamchatApp], config_path: Path
) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text('engine = "torch"\n')
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        chosen: list[ModelSpec | None] = []
        current = dataclasses.replace(app.spec, device="cpu")
        await app.push_screen(ModelScreen(current, []), chosen.append)
        engine = app.screen.query_one("#model-engine", Select)
        assert engine.value == "torch"  # config.toml's engine
        engine.focus()
        await pilot.press("enter")  # open the list: auto, torch, llamacpp
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: engine.value == "llamacpp")
        app.screen.query_one("#model-source", Input).focus()
        await pilot.press("enter")
        await wait_for(pilot, lambda: chosen == [ModelSpec(device="cpu", engine="llamacpp")])


async def test_engine_from_the_model_screen_reaches_the_loader(
    make_app: Callable[..., SamchatApp], tmp_path: Path
) -> None:
    """llama.cpp picked for a Hugging Face model directory: the loader's one-line reason is a
    notice, and the choice is not saved (nothing loaded)."""
    model_dir = tmp_path / "hf-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelScreen))
        app.screen.query_one("#model-engine", Select).value = "llamacpp"
        await type_path(pilot, app, model_dir)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.model_state == "failed", 60)
        [problem] = [n for n in notices(app) if "llama.cpp" in n]
        assert "runs .gguf files" in problem and "\n" not in problem
        assert app.cfg.engine == "auto"


async def test_engine_flag_beats_config_and_a_bad_engine_is_reported(
    make_app: Callable[..., SamchatApp], config_path: Path, tmp_path: Path
) -> None:
    config_path.parent.mkdir(parents=True)
    config_path.write_text('engine = "torch"\n')
    assert make_app().spec.engine == "torch"
    model_dir = tmp_path / "hf-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    # `samchat --engine llamacpp --model DIR`: the app starts; the model's failure is a notice.
    app = make_app(spec=ModelSpec(str(model_dir), engine="llamacpp"), autoload_model=True)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.spec.engine == "llamacpp"
        await wait_for(pilot, lambda: app.model_state == "failed", 60)
        assert any("runs .gguf files" in n for n in notices(app))
    config_path.write_text('engine = "llama"\n')
    app = make_app()
    async with app.run_test() as pilot:
        await pilot.pause()
        [problem] = [n for n in notices(app) if "engine" in n]
        assert "engine must be one of auto, torch, llamacpp" in problem and "\n" not in problem
        assert app.spec.engine == "auto"


def test_the_engine_flag_reaches_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
    from samchat.cli import main

    started: list[tuple[str, str]] = []

    def run(app: SamchatApp) -> None:  # the app itself runs in the Pilot tests
        started.append((app.spec.engine, app.spec.device))

    monkeypatch.setattr(SamchatApp, "run", run)
    assert main(["--engine", "torch", "--device", "cpu"]) == 0
    assert main([]) == 0
    assert started == [("torch", "cpu"), ("auto", "auto")]


def test_the_app_gives_the_thread_its_priority_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """While the app runs its UI thread gives way to the engine (the idle policy, or niceness);
    after, the thread is as it was: a process it starts later (a test's) would inherit the
    idle policy and starve on a busy machine."""
    import os
    import threading

    from samchat.cli import main

    me = threading.get_native_id()
    before = (os.sched_getscheduler(me), os.getpriority(os.PRIO_PROCESS, me))
    during: list[int] = []
    monkeypatch.setattr(SamchatApp, "run", lambda app: during.append(os.sched_getscheduler(me)))
    assert main([]) == 0
    assert during == [os.SCHED_IDLE]
    assert (os.sched_getscheduler(me), os.getpriority(os.PRIO_PROCESS, me)) == before


def test_ui_starts_without_importing_torch(tmp_path: Path) -> None:
    """Start the real app headless in a fresh interpreter: interactive with no torch or
    transformers imported (what makes it start fast; how fast is machine-dependent and not
    asserted: 1.13 CPU seconds on an AVX2-only EPYC VM under load, under 1 s elsewhere), the
    database open. The first start creates the database (sqlite-utils runs the migrations);
    every later start opens it without importing sqlite-utils."""
    script = """
import asyncio, sys, time
from samchat.tui.app import SamchatApp

async def main():
    app = SamchatApp(autoload_model=False)
    async with app.run_test() as pilot:
        await pilot.pause()
        print(f"ready {app.ready_cpu:.3f} {app.ready_at - app.started_at:.3f}")
        print(app.data is not None, app.data_state)
        print("torch" in sys.modules, "transformers" in sys.modules, "sqlite_utils" in sys.modules)

asyncio.run(main())
"""
    env = dict(os.environ)
    for name in ("DATA", "CACHE", "CONFIG"):
        env[f"SAMCHAT_{name}_DIR"] = str(tmp_path / name.lower())
    for start in ("first", "later"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.split("\n")
        assert out[0].startswith("ready "), start
        assert out[1] == "True ready", start  # opened in on_mount, before the UI is ready
        torch, transformers, sqlite_utils = out[2].split()
        assert (torch, transformers) == ("False", "False"), start
        if start == "later":  # the usual start: the database exists and is up to date
            assert sqlite_utils == "False"


def test_config_round_trip(tmp_path: Path) -> None:
    from samchat.chat.config import Config, load_config, save_config
    from samchat.corpus.rule import RetrievalRule

    cfg = fixed_config(
        theme="ember",
        keymap={"samchat.help": "f10", "samchat.new_chat": "ctrl+k"},
        model='C:\\models\\my "model"',
        device="cpu",
        engine="llamacpp",
    )
    cfg.sampling = dataclasses.replace(cfg.sampling, temperature=0.5)
    cfg.documents = RetrievalRule(relevance=0.75, passages=3, tokens=800)
    path = save_config(cfg, Config(), tmp_path / "c.toml")
    again = load_config(path)
    assert again == cfg
    assert tomllib.loads(path.read_text())["engine"] == "llamacpp"


def test_a_bad_engine_in_the_config_file_is_one_line(tmp_path: Path) -> None:
    from samchat.chat.config import ConfigError, load_config

    path = tmp_path / "c.toml"
    for text in ('engine = "gpu"\n', "engine = 3\n"):
        path.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert "engine" in str(err.value) and "\n" not in str(err.value)


async def test_import_goes_on_after_the_screen_is_closed(
    make_app: Callable[..., SamchatApp], tmp_path: Path, store: Store
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    for n in range(3):
        (docs / f"note{n}.txt").write_text(f"Note number {n} about drafting.\n")
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+o")
        await wait_for(pilot, lambda: isinstance(app.screen, ImportScreen))
        await type_path(pilot, app, docs)
        await pilot.press("enter", "escape")
        await wait_for(pilot, lambda: not isinstance(app.screen, ImportScreen))
        await wait_for(pilot, lambda: any("imported 3 documents" in n for n in notices(app)), 30)
        assert len(store.documents()) == 3


async def test_model_screen_offers_the_models_found_on_this_machine(
    make_app: Callable[..., SamchatApp], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The picker lists what `samchat models` lists (here an Ollama store), found by a worker;
    choosing one returns the source --model takes."""
    from tests.models.test_models_catalog import ollama_store

    ollama_store(tmp_path / "ollama")
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "no-hub"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        chosen: list[ModelSpec | None] = []
        await app.push_screen(ModelScreen(ModelSpec(device="cpu"), []), chosen.append)
        options = app.screen.query_one("#model-list", OptionList)
        await wait_for(pilot, lambda: options.option_count == 2)
        found = options.get_option_at_index(1)
        assert found.id == "model-found-0" and "ollama, gguf" in str(found.prompt)
        options.focus()
        options.highlighted = 1
        await pilot.press("enter")
        await wait_for(pilot, lambda: chosen == [ModelSpec("ollama:smol", device="cpu")])


async def test_cuda_graphs_on_the_command_line_reach_the_app() -> None:
    """`samchat --cuda-graphs` loads the app's model with that option, as `ask` does: on a
    CPU, the loader's one-line refusal, and the UI stays up."""
    import torch

    from samchat.cli import build_parser
    from samchat.tui.launch import app_from_args

    app = app_from_args(build_parser(with_commands=False).parse_args(["--cuda-graphs"]))
    assert app.spec.cuda_graphs is True
    async with app.run_test(size=(120, 40)) as pilot:
        if torch.cuda.is_available():
            await wait_for(pilot, lambda: app.model_state == "ready", 120)
            assert getattr(app.lm, "steps", None) == "graphs"
            return
        await wait_for(pilot, lambda: app.model_state == "failed", 60)
        assert any("--cuda-graphs needs a CUDA GPU" in n for n in notices(app)), notices(app)
        await pilot.press("f1")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))


async def test_model_options_of_the_command_line_survive_a_model_switch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`samchat --cuda-graphs --dtype float32`: the ModelSpec the app loads carries both, and
    so does the one it loads after another model is picked on the model screen. The command
    line and config.toml make one ModelSpec, as for `ask` and `serve` (cli_options)."""
    from samchat.cli import build_parser
    from samchat.tui.launch import app_from_args

    loaded: list[ModelSpec] = []

    def open_model(spec: ModelSpec, *args: Any, **kwargs: Any) -> Any:
        loaded.append(spec)
        raise SamchatError("not loading models in this test")

    monkeypatch.setattr("samchat.tui.model_loading.open_model", open_model)
    # config.toml names a model, device and engine: the command line's device wins, even when
    # it is "auto"; its model and engine fill what the command line leaves out.
    config_file = Path(os.environ["SAMCHAT_CONFIG_DIR"]) / "config.toml"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text('model = "ollama:smol"\ndevice = "cuda"\nengine = "torch"\n')
    parse = build_parser(with_commands=False).parse_args
    assert app_from_args(parse(["--device", "auto"])).spec == ModelSpec(
        "ollama:smol", device="auto", engine="torch"
    )
    config_file.unlink()
    args = ["--cuda-graphs", "--dtype", "float32", "--device", "cpu"]
    app = app_from_args(parse(args))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.model_state == "failed", 30)
        assert loaded == [ModelSpec(device="cpu", dtype="float32", cuda_graphs=True)]
        await pilot.press("ctrl+l")
        await wait_for(pilot, lambda: isinstance(app.screen, ModelScreen))
        app.screen.query_one("#model-engine", Select).value = "torch"
        await type_path(pilot, app, tmp_path / "other-model")
        await pilot.press("enter")
        await wait_for(pilot, lambda: len(loaded) == 2, 30)
        other = ModelSpec(
            str(tmp_path / "other-model"),
            device="cpu",
            dtype="float32",
            engine="torch",
            cuda_graphs=True,
        )
        assert loaded[1] == other
