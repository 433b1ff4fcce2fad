"""The stored record of a reply: the engine's statistics and provenance, the finish reason, any
notice, the sources it was given and a short speed trace, built from the event stream the same
way by every front end, and saved through one call (`save_reply`).

The record stays typed (`StoredStats`) through the chat layer; it becomes the JSON object the
store keeps (`StoredStats.to_dict`, the same keys as ever) only where it is written. What the
app shows of it, fresh or read back from the store, is a `ShownStats` (samchat.chat.shown_stats,
which parses the stored object of any version)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from samchat.chat.live_stats import LiveStats

if TYPE_CHECKING:
    from samchat.decoding.events import Event, ReplyDone, ReplyStats
    from samchat.store import Store

TRACE_POINTS = 60  # tokens/s samples kept with a reply (the TUI's sparkline shows them)


@dataclass(frozen=True)
class StoredStats:
    """What the store keeps of a reply beside its text: the engine's figures and provenance,
    the finish reason, the speed trace, any notice and the sources put before the question."""

    reply: ReplyStats
    finish_reason: str
    speed_trace: tuple[float, ...] = ()  # tokens/s, the last TRACE_POINTS samples
    notice: str = ""
    sources: tuple[dict[str, Any], ...] = ()  # Source.record() of each

    def to_dict(self) -> dict[str, Any]:
        """The JSON object stored with the reply (messages.stats)."""
        stats = self.reply.to_dict()
        stats["finish_reason"] = self.finish_reason
        stats["speed_trace"] = list(self.speed_trace)
        if self.notice:
            stats["notice"] = self.notice
        if self.sources:
            stats["sources"] = list(self.sources)
        return stats

    def provenance_summary(self) -> dict[str, int]:
        """Characters of the reply per drafter ("plain": not drafted)."""
        out: dict[str, int] = {}
        for chars, drafter in self.reply.provenance:
            out[drafter] = out.get(drafter, 0) + int(chars)
        return out


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
    come here): the typed record becomes the stored JSON here."""
    return store.add_message(
        chat_id,
        "assistant",
        text,
        parent_id,
        model=model,
        stats=stats.to_dict() if stats is not None else None,
        finish_reason=finish_reason,
    )
