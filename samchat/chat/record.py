"""The stored record of a reply: the engine's statistics and provenance, the finish reason, any
notice, the sources it was given and a short speed trace, built from the event stream the same
way by every front end, and saved through one call (`save_reply`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from samchat.chat.live_stats import LiveStats

if TYPE_CHECKING:
    from samchat.decoding.events import Event, ReplyDone
    from samchat.store import Store

TRACE_POINTS = 60  # tokens/s samples kept with a reply (the TUI's sparkline shows them)


class ReplyRecorder:
    """Watches one reply's events; `stats(done)` is what the store keeps for it. The speed
    trace is LiveStats' (what the TUI's sparkline shows while the reply streams)."""

    def __init__(
        self, started: float | None = None, sources: list[dict[str, Any]] | None = None
    ) -> None:
        self.live = LiveStats(time.perf_counter() if started is None else started)
        self.sources = list(sources or [])  # the documents put before the question

    def observe(self, event: Event, at: float | None = None) -> None:
        from samchat.decoding.events import TextDelta

        if isinstance(event, TextDelta) and event.tokens:
            now = time.perf_counter() if at is None else at
            self.live.on_delta(event.tokens, list(event.sources), now)

    def stats(self, done: ReplyDone) -> dict[str, Any]:
        stats = done.stats.to_dict()
        stats["finish_reason"] = done.finish_reason
        stats["speed_trace"] = [round(x, 2) for x in self.live.speeds[-TRACE_POINTS:]]
        if done.notice:
            stats["notice"] = done.notice
        if self.sources:
            stats["sources"] = self.sources
        return stats


def save_reply(
    store: Store,
    chat_id: int,
    parent_id: int,
    text: str,
    *,
    model: str | None,
    stats: dict[str, Any] | None,
    finish_reason: str | None,
) -> int:
    """The one write path of a reply (the TUI and `samchat ask` both come here)."""
    return store.add_message(
        chat_id, "assistant", text, parent_id, model=model, stats=stats, finish_reason=finish_reason
    )


def provenance_summary(stats: dict[str, Any]) -> dict[str, int]:
    """Characters of the reply per drafter ("plain": not drafted), from the stored record."""
    out: dict[str, int] = {}
    for chars, drafter in stats.get("provenance") or ():
        out[drafter] = out.get(drafter, 0) + int(chars)
    return out
