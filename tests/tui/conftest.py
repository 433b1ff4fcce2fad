"""Fixtures for the TUI tests: a real SQLite store in tmp_path and the real app."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from samchat.store import Store
from samchat.tui.app import SamchatApp
from samchat.tui.themes import bundled_theme_dir


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run `async def` tests in a fresh event loop (Textual's run_test is async)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(pyfuncitem.obj(**args))
    return True


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "samchat.db"


@pytest.fixture
def store(db_path: Path) -> Store:
    st = Store.open(db_path)
    yield st  # type: ignore[misc]
    st.close()


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "config.toml"


@pytest.fixture
def user_theme_dir(tmp_path: Path) -> Path:
    path = tmp_path / "user-themes"
    path.mkdir()
    return path


@pytest.fixture
def make_app(db_path: Path, config_path: Path, user_theme_dir: Path) -> Callable[..., SamchatApp]:
    def make(**kwargs: Any) -> SamchatApp:
        kwargs.setdefault("db_path", db_path)
        kwargs.setdefault("config_path", config_path)
        kwargs.setdefault("autoload_model", False)
        kwargs.setdefault("theme_dirs", [bundled_theme_dir(), user_theme_dir])
        return SamchatApp(**kwargs)

    return make
