"""Snapshot tests (pytest-textual-snapshot): main screen, help, settings and a themed screen.

Update the SVGs after an intended change with `pytest tests/tui/test_snapshots.py
--snapshot-update` and look at them (the report shows a diff of any mismatch).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from textual.pilot import Pilot
from tui_helpers import fixed_config, seed_chat, wait_for

from samchat.store import Store
from samchat.tui.app import SamchatApp

SIZE = (110, 32)
REPLY = (
    "A **suffix automaton** recognises every substring of a text.\n\n"
    "```python\nsam = SuffixAutomaton()\nfor t in tokens:\n    sam.extend(t)\n```\n"
)
STATS = {
    "tokens": 40,
    "seconds": 1.6,
    "tokens_per_s": 25.0,
    "steps": 16,
    "mat": 2.5,
    "speedup_est": 1.9,
    "accepted_by_drafter": {"dyn": 14, "static": 6, "tr": 4, "plain": 16},
    "method": "sam+tr",
    "provenance": [
        [2, "plain"],
        [19, "dyn"],
        [21, "static"],
        [15, "tr"],
        [len(REPLY) - 57, "plain"],
    ],
}


@pytest.fixture
def seeded(store: Store) -> int:
    seed_chat(store, "Cooking pasta", [("How long should spaghetti boil?", "About 9 minutes.")])
    return seed_chat(store, "Suffix automata", [("What is a suffix automaton?", REPLY)], **STATS)


def opener(chat_id: int, *keys: str) -> Callable[[Pilot[Any]], Any]:
    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, SamchatApp)
        # The auto-pilot starts with the app, before its chat screen has composed.
        await wait_for(pilot, lambda: app.chat.query("#chat-view"))
        await app.chat.open_chat(chat_id)
        app.chat.prompt.cursor_blink = False  # a blinking cursor would make the picture random
        app.chat.prompt.focus()
        if keys:
            await pilot.press(*keys)
        await pilot.pause()

    return run_before


def test_main_screen(snap_compare: Any, make_app: Callable[..., SamchatApp], seeded: int) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=opener(seeded))


def test_help_screen(snap_compare: Any, make_app: Callable[..., SamchatApp], seeded: int) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=opener(seeded, "f1"))


def test_settings_screen(
    snap_compare: Any, make_app: Callable[..., SamchatApp], seeded: int
) -> None:
    assert snap_compare(make_app(), terminal_size=SIZE, run_before=opener(seeded, "ctrl+s"))


def test_light_theme_with_provenance_and_figures(
    snap_compare: Any, make_app: Callable[..., SamchatApp], seeded: int
) -> None:
    app = make_app(config=fixed_config(theme="samchat-light"))
    assert snap_compare(app, terminal_size=SIZE, run_before=opener(seeded, "f9", "f6"))
