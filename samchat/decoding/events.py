"""What ChatSession.generate streams: the progress of reading a long prompt, text as it is
committed, per-step and per-reply statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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


@dataclass(frozen=True)
class StepStats:
    """One verification forward."""

    drafter: str  # "dyn" | "static" | "tr" | "plain"
    draft_size: int  # draft nodes verified (0 for a plain step)
    accepted: int  # draft tokens accepted (the bonus token not counted)
    forward_s: float


@dataclass(frozen=True)
class ReplyStats:
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
    method: str = "plain"
    # (characters, drafter) runs covering the reply text exactly, in order.
    provenance: tuple[tuple[int, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
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


@dataclass(frozen=True)
class ReplyDone:
    text: str
    finish_reason: str  # eos | stop | length | cancelled | context
    stats: ReplyStats
    notice: str = ""  # e.g. "dropped 2 oldest turns to fit the context"


@dataclass(frozen=True)
class PrefillProgress:
    """A long prompt is being read: `done` of its `total` new tokens are in the cache. Sent
    first with done 0, then after each piece, only for prompts longer than one piece."""

    done: int
    total: int


Event = TextDelta | StepStats | ReplyDone | PrefillProgress
