"""The stored record of a reply (`StoredStats`, samchat.figures: the engine's figures and
provenance, the finish reason, any notice, the sources it was given and a short speed trace),
built from the event stream the same way by every front end, and saved through one call
(`save_reply`). It stays typed through the chat layer, the store and the views alike: the store
turns it into JSON where it writes it and parses it back where it reads it."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from samchat.chat.live_stats import LiveStats
from samchat.figures import SourceRef, StoredStats

if TYPE_CHECKING:
    from samchat.decoding.events import Event, ReplyDone
    from samchat.store import Store

__all__ = ["TRACE_POINTS", "ReplyRecorder", "SourceRef", "StoredStats", "save_reply"]

TRACE_POINTS = 60  # tokens/s samples kept with a reply (the TUI's sparkline shows them)


class ReplyRecorder:
    """Watches one reply's events; `stats(done)` is what the store keeps for it. The speed
    trace is LiveStats' (what the TUI's sparkline shows while the reply streams)."""

    def __init__(self, started: float | None = None, sources: Sequence[SourceRef] = ()) -> None:
        self.live = LiveStats(time.perf_counter() if started is None else started)
        self.sources = list(sources or [])  # the documents put before the question

    def observe(self, event: Event, at: float | None = None) -> None:
        from samchat.decoding.events import TextDelta

        if isinstance(event, TextDelta) and event.tokens:
            now = time.perf_counter() if at is None else at
            self.live.on_delta(event.tokens, list(event.sources), now)

    def stats(self, done: ReplyDone) -> StoredStats:
        return StoredStats(
            done.stats,
            done.finish_reason,
            tuple(round(x, 2) for x in self.live.speeds[-TRACE_POINTS:]),
            done.notice,
            tuple(self.sources),
        )


def save_reply(
    store: Store,
    chat_id: int,
    parent_id: int,
    text: str,
    *,
    model: str | None,
    stats: StoredStats | None,
    finish_reason: str | None,
) -> int:
    """The one write path of a reply (the TUI, `samchat ask` and `samchat serve --save` all
    come here)."""
    return store.add_message(
        chat_id,
        "assistant",
        text,
        parent_id,
        model=model,
        stats=stats,
        finish_reason=finish_reason,
    )
