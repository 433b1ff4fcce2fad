"""Helpers shared by the TUI tests (imported as a plain module: tests/ has no packages)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from samchat.chat.config import Config
from samchat.figures import StoredStats
from samchat.store import Store


def seed_chat(store: Store, title: str, turns: list[tuple[str, str]], **stats: Any) -> int:
    """A chat with alternating user/assistant messages on one branch."""
    chat_id = store.create_chat(title, "SmolLM2-135M-Instruct", created_at=1_700_000_000.0)
    parent: int | None = None
    for n, (user, reply) in enumerate(turns):
        parent = store.add_message(chat_id, "user", user, parent, created_at=1_700_000_000.0 + n)
        parent = store.add_message(
            chat_id,
            "assistant",
            reply,
            parent,
            "SmolLM2-135M-Instruct",
            StoredStats.parse(stats),
            created_at=1_700_000_000.5 + n,
        )
    return chat_id


async def wait_for(pilot: Any, condition: Callable[[], object], timeout: float = 30.0) -> None:
    """Let the app run until `condition()` is true (fails the test on timeout)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        await pilot.pause(0.05)


def fixed_config(**kwargs: Any) -> Config:
    cfg = Config()
    for key, value in kwargs.items():
        setattr(cfg, key, value)
    return cfg
