"""A reply's figures as the app shows them (`ShownStats`): built from the typed record of a
reply that just finished (`ShownStats.of`), or read back from the JSON object the store keeps
(`ShownStats.parse`).

Stored objects come from every earlier version and may lack keys, carry keys since dropped, or
hold values of the wrong type: parsing is lenient, so an old or damaged row shows defaults
rather than breaking the chat it belongs to. The defaults are what the readers assumed when
they read the raw dict (0 tokens, 0.0 seconds, no method, ...)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from samchat.chat.record import StoredStats

T = TypeVar("T", int, float)


@dataclass(frozen=True)
class ShownStats:
    """What the message view, its figures line and the stats bar show of a finished reply."""

    present: bool = False  # any figures at all (False: none stored, or not a reply)
    tokens: int = 0
    seconds: float = 0.0
    tokens_per_s: float = 0.0
    mat: float = 0.0
    speedup_est: float = 0.0
    ttft_s: float = 0.0
    method: str = ""  # "" when a row predates it
    accepted_by_drafter: dict[str, int] = field(default_factory=dict)
    finish_reason: str = ""
    speed_trace: tuple[float, ...] = ()
    sources: tuple[dict[str, Any], ...] = ()  # Source.record() of each document given
    provenance: tuple[tuple[int, str], ...] = ()  # (characters, drafter) runs

    @classmethod
    def of(cls, stats: StoredStats) -> ShownStats:
        """The figures of a reply that just finished, as its record holds them."""
        reply = stats.reply
        return cls(
            present=True,
            tokens=reply.tokens,
            seconds=reply.seconds,
            tokens_per_s=reply.tokens_per_s,
            mat=reply.mat,
            speedup_est=reply.speedup_est,
            ttft_s=reply.ttft_s,
            method=reply.method,
            accepted_by_drafter=dict(reply.accepted_by_drafter),
            finish_reason=stats.finish_reason,
            speed_trace=stats.speed_trace,
            sources=stats.sources,
            provenance=reply.provenance,
        )

    @classmethod
    def parse(cls, stored: object) -> ShownStats:
        """The figures of a stored JSON object (messages.stats) of any version; anything but a
        non-empty object shows as none stored."""
        if not isinstance(stored, Mapping) or not stored:
            return cls()
        get = stored.get
        return cls(
            present=True,
            tokens=_number(int, get("tokens"), 0),
            seconds=_number(float, get("seconds"), 0.0),
            tokens_per_s=_number(float, get("tokens_per_s"), 0.0),
            mat=_number(float, get("mat"), 0.0),
            speedup_est=_number(float, get("speedup_est"), 0.0),
            ttft_s=_number(float, get("ttft_s"), 0.0),
            method=_text(get("method")),
            accepted_by_drafter=_counts(get("accepted_by_drafter")),
            finish_reason=_text(get("finish_reason")),
            speed_trace=_trace(get("speed_trace")),
            sources=_sources(get("sources")),
            provenance=_runs(get("provenance")),
        )


def _number(kind: Callable[[Any], T], value: object, default: T) -> T:
    converted = _convert(kind, value)
    return default if converted is None else converted


def _convert(kind: Callable[[Any], T], value: object) -> T | None:
    """int()/float() as the readers of the raw dict applied them (so "3" still reads 3); None
    where that fails, where they raised."""
    if value is None:
        return None
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _counts(value: object) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    counts = {str(k): _convert(int, v) for k, v in value.items()}
    return {k: n for k, n in counts.items() if n is not None}


def _trace(value: object) -> tuple[float, ...]:
    if not isinstance(value, list | tuple):
        return ()
    points = [_convert(float, x) for x in value]
    return tuple(x for x in points if x is not None)


def _sources(value: object) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list | tuple):
        return ()
    return tuple(dict(s) for s in value if isinstance(s, Mapping))


def _runs(value: object) -> tuple[tuple[int, str], ...]:
    """[[n_chars, drafter], ...]; all or nothing, since the runs only mean something if they
    cover the reply exactly."""
    if not isinstance(value, list | tuple):
        return ()
    runs: list[tuple[int, str]] = []
    for run in value:
        n = _convert(int, run[0]) if isinstance(run, list | tuple) and len(run) == 2 else None
        if n is None:
            return ()
        runs.append((n, str(run[1])))
    return tuple(runs)
