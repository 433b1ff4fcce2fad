"""What ChatSession.generate streams: the progress of reading a long prompt, text as it is
committed, per-step and per-reply statistics (ReplyStats, from samchat.figures)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from samchat.figures import ReplyStats  # the reply's figures: the record every layer shares
from samchat.names import DraftSource


@dataclass(frozen=True)
class TextDelta:
    """Newly committed text; sources[i] is the drafter of token_ids[i] ("plain" for a bonus),
    and `pieces` cuts `text` by the drafter of the tokens that produced each character."""

    text: str
    token_ids: list[int]
    sources: list[str]
    pieces: tuple[tuple[str, str], ...] = ()

    @property
    def tokens(self) -> int:
        """Tokens this delta commits: one per id, or for a remote chunk (no ids) one per source."""
        return len(self.token_ids) or len(self.sources)


class HostTimes(NamedTuple):
    """A step's seconds on the host, outside the engine's forward, by what they went to (a
    tuple: one is made every step)."""

    draft: float = 0.0  # the selector and the drafters' proposals
    tree: float = 0.0  # a tree draft's verification layout
    accept: float = 0.0  # walking the model's choices, committing the path to the cache
    learn: float = 0.0  # statistics: cost tracker, acceptance rates, automata, recycling table
    emit: float = 0.0  # the committed tokens as text: detokenizing, stop strings

    @property
    def total(self) -> float:
        return self.draft + self.tree + self.accept + self.learn + self.emit

    @property
    def per_step(self) -> float:
        """What drafting a step costs the host beyond the tokens it commits: all but `emit`,
        which every committed token pays alike, drafted or not."""
        return self.total - self.emit

    def parts(self) -> dict[str, float]:
        return self._asdict()


NO_HOST_TIMES = HostTimes()  # a step whose host time was not measured


@dataclass(frozen=True)
class StepStats:
    """One verification step: `forward_s` from the verification's start to its commit to the
    cache, `engine_s` of it in the engine's forward, `host` the step's other seconds."""

    drafter: DraftSource
    draft_size: int  # draft nodes verified (0 for a plain step)
    accepted: int  # draft tokens accepted (the bonus token not counted)
    forward_s: float
    engine_s: float = 0.0
    host: HostTimes = NO_HOST_TIMES


@dataclass(frozen=True)
class ReplyDone:
    text: str
    finish_reason: str  # a samchat.names.FinishReason, or a remote reply's (e.g. "interrupted")
    stats: ReplyStats
    notice: str = ""  # e.g. "dropped 2 oldest turns to fit the context"


@dataclass(frozen=True)
class PrefillProgress:
    """A long prompt is being read: `done` of its `total` new tokens are in the cache. Sent
    first with done 0, then after each piece, only for prompts longer than one piece."""

    done: int
    total: int


__all__ = [
    "Event",
    "HostTimes",
    "PrefillProgress",
    "ReplyDone",
    "ReplyStats",
    "StepStats",
    "TextDelta",
]

Event = TextDelta | StepStats | ReplyDone | PrefillProgress
