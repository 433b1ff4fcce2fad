"""Chat sessions with KV reuse and lossless speculative decoding (suffix-automaton drafts,
tree verification), streaming text and statistics as events.

The names below load lazily (PEP 562): `from samchat.decoding import DecodingConfig` imports
params.py only, no torch; `ChatSession` imports the session on first use (and torch only where
the torch engine runs).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from samchat.decoding.events import (
        Event,
        PrefillProgress,
        ReplyDone,
        ReplyStats,
        StepStats,
        TextDelta,
    )
    from samchat.decoding.params import METHODS, DecodingConfig, SamplingParams
    from samchat.decoding.policy import Selector
    from samchat.decoding.protocols import Drafter
    from samchat.decoding.session import ChatSession
    from samchat.decoding.tree import DraftTree

# name -> the module (under samchat.decoding) that defines it
_WHERE = {
    "Drafter": "protocols",
    "Selector": "policy",
    "Event": "events",
    "PrefillProgress": "events",
    "ReplyDone": "events",
    "ReplyStats": "events",
    "StepStats": "events",
    "TextDelta": "events",
    "METHODS": "params",
    "DecodingConfig": "params",
    "SamplingParams": "params",
    "ChatSession": "session",
    "DraftTree": "tree",
}

__all__ = [
    "METHODS",
    "ChatSession",
    "DecodingConfig",
    "DraftTree",
    "Drafter",
    "Event",
    "PrefillProgress",
    "ReplyDone",
    "ReplyStats",
    "SamplingParams",
    "Selector",
    "StepStats",
    "TextDelta",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
