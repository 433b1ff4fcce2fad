"""A reply's typed values, one per notion, shared by every layer: its figures (`ReplyStats`, which
the session or a remote stream fills), the documents it was given (`SourceRef`) and what the
store keeps of it beside its text (`StoredStats`), which the views read.

`StoredStats.to_dict` is the JSON object the store writes (messages.stats, the keys every version
wrote) and `StoredStats.parse` reads one back. Stored objects come from every earlier version and
may lack keys, carry keys since dropped, or hold values of the wrong type: parsing is lenient, so
an old or damaged row shows defaults rather than breaking the chat it belongs to. The defaults are
what the readers assumed when they read the raw dict (0 tokens, 0.0 seconds, no method, ...)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T", int, float)
Json = dict[str, object]  # a JSON object as json.dumps takes it


@dataclass(frozen=True)
class SourceRef:
    """A document put before a question, as a saved reply and `ask --json` name it."""

    title: str
    path: str | None  # the file (or URL) it came from; None for stdin
    passage_id: int | None = None  # set for retrieved passages
    document_id: int | None = None

    @property
    def label(self) -> str:
        return self.title + (f" ({self.path})" if self.path else "")

    def to_dict(self) -> Json:
        return {
            "title": self.title,
            "path": self.path,
            "passage_id": self.passage_id,
            "document_id": self.document_id,
        }

    @classmethod
    def parse(cls, stored: object) -> SourceRef | None:
        """A stored reference of any version; None for anything but a JSON object."""
        if not isinstance(stored, Mapping):
            return None
        path = stored.get("path")
        return cls(
            str(stored.get("title")),
            path if isinstance(path, str) else None,
            _convert(int, stored.get("passage_id")),
            _convert(int, stored.get("document_id")),
        )


@dataclass(frozen=True)
class ReplyStats:
    """A reply's figures."""

    tokens: int
    seconds: float  # decoding time after the prefill
    tokens_per_s: float
    steps: int
    mat: float  # mean tokens committed per step, bonus included (1.0 = plain)
    accepted_by_drafter: dict[str, int] = field(default_factory=dict)
    speedup_est: float = 1.0  # vs plain decoding, from the measured one-token forward time
    prefill_s: float = 0.0
    ttft_s: float = 0.0  # generate() call to the first TextDelta
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV came from the previous call
    method: str = "plain"  # a samchat.names.Method, "remote", or "" in rows that predate it
    # (characters, drafter) runs covering the reply text exactly, in order.
    provenance: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> Json:
        return {
            "tokens": self.tokens,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "steps": self.steps,
            "mat": self.mat,
            "accepted_by_drafter": dict(self.accepted_by_drafter),
            "speedup_est": self.speedup_est,
            "prefill_s": self.prefill_s,
            "ttft_s": self.ttft_s,
            "prompt_tokens": self.prompt_tokens,
            "reused_tokens": self.reused_tokens,
            "method": self.method,
            "provenance": [[n, source] for n, source in self.provenance],
        }

    @classmethod
    def parse(cls, stored: Mapping[str, object]) -> ReplyStats:
        """The figures of a stored JSON object of any version (see the module's docstring)."""
        get = stored.get
        return cls(
            tokens=_number(int, get("tokens"), 0),
            seconds=_number(float, get("seconds"), 0.0),
            tokens_per_s=_number(float, get("tokens_per_s"), 0.0),
            steps=_number(int, get("steps"), 0),
            mat=_number(float, get("mat"), 0.0),
            accepted_by_drafter=_counts(get("accepted_by_drafter")),
            speedup_est=_number(float, get("speedup_est"), 0.0),
            prefill_s=_number(float, get("prefill_s"), 0.0),
            ttft_s=_number(float, get("ttft_s"), 0.0),
            prompt_tokens=_number(int, get("prompt_tokens"), 0),
            reused_tokens=_number(int, get("reused_tokens"), 0),
            method=_text(get("method")),
            provenance=_runs(get("provenance")),
        )


@dataclass(frozen=True)
class StoredStats:
    """What the store keeps of a reply beside its text: its figures and provenance, the finish
    reason, the speed trace, any notice and the sources put before the question."""

    reply: ReplyStats
    finish_reason: str  # a samchat.names.FinishReason, a server's, or "" in old rows
    speed_trace: tuple[float, ...] = ()  # tokens/s, the last samples of the stream
    notice: str = ""
    sources: tuple[SourceRef, ...] = ()

    def to_dict(self) -> Json:
        """The JSON object stored with the reply (messages.stats)."""
        stats = self.reply.to_dict()
        stats["finish_reason"] = self.finish_reason
        stats["speed_trace"] = list(self.speed_trace)
        if self.notice:
            stats["notice"] = self.notice
        if self.sources:
            stats["sources"] = [s.to_dict() for s in self.sources]
        return stats

    @classmethod
    def parse(cls, stored: object) -> StoredStats | None:
        """The record of a stored JSON object (messages.stats) of any version; None for
        anything but a non-empty object (nothing stored)."""
        if not isinstance(stored, Mapping) or not stored:
            return None
        get = stored.get
        sources = get("sources")
        refs = [SourceRef.parse(s) for s in sources] if isinstance(sources, list | tuple) else []
        return cls(
            ReplyStats.parse(stored),
            _text(get("finish_reason")),
            _trace(get("speed_trace")),
            _text(get("notice")),
            tuple(r for r in refs if r is not None),
        )

    def provenance_summary(self) -> dict[str, int]:
        """Characters of the reply per drafter ("plain": not drafted)."""
        out: dict[str, int] = {}
        for chars, drafter in self.reply.provenance:
            out[drafter] = out.get(drafter, 0) + int(chars)
        return out


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
