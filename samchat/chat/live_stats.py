"""Running figures for one streaming reply: tokens/s, MAT, speedup, drafter shares, speed trace.

Pure Python (no textual, no torch) so it is cheap to test. The engine's figures (the reply's
StoredStats) replace the live estimates when the reply finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from samchat.figures import ReplyStats, StoredStats
from samchat.names import DRAFTERS
from samchat.remote import REMOTE

if TYPE_CHECKING:
    from samchat.chat.reply_feed import FeedBatch


@dataclass
class LiveStats:
    started: float
    tokens: int = 0
    steps: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    speeds: list[float] = field(default_factory=list)  # tokens/s of each committed chunk
    forward_s: float = 0.0
    plain_forward_s: float = 0.0  # forward time of this reply's plain (one-row) steps
    plain_steps: int = 0
    last_t: float = 0.0
    first_t: float = 0.0  # when the first text came
    first_tokens: int = 0  # the tokens that came with it (the rate counts those after)
    decode_t: float = 0.0  # when decoding began: the first step's end less its forward
    final: ReplyStats | None = None  # the engine's figures, once done
    # The live tok/s and speedup last shown before the engine's figures replaced them.
    shown_at_end: tuple[float, float] = (0.0, 0.0)

    def on_delta(self, n_tokens: int, sources: list[str], t: float) -> None:
        prev = self.last_t or self.started
        if not self.first_t:
            self.first_t, self.first_tokens = t, n_tokens
        self.tokens += n_tokens
        for src in sources:
            self.by_source[src] = self.by_source.get(src, 0) + 1
        if t > prev and n_tokens:
            self.speeds.append(n_tokens / (t - prev))
        self.last_t = t

    def on_step(self, forward_s: float, plain: bool = False, t: float = 0.0) -> None:
        """One verification step of `forward_s`, ended at `t` (0: not known)."""
        if t and not self.decode_t:
            self.decode_t = t - forward_s
        self.steps += 1
        self.forward_s += forward_s
        if plain and forward_s > 0:
            self.plain_forward_s += forward_s
            self.plain_steps += 1

    def apply(self, batch: FeedBatch) -> None:
        """A frame's worth of a reply's events (samchat.chat.reply_feed), in order."""
        for forward_s, plain, t in batch.steps:
            self.on_step(forward_s, plain, t)
        for n_tokens, sources, t in batch.deltas:
            self.on_delta(n_tokens, sources, t)

    def on_done(self, stats: StoredStats) -> None:
        if self.final is None:
            self.shown_at_end = (self.tokens_per_s, self.speedup_est)
        self.final = stats.reply

    @property
    def remote(self) -> bool:
        """The reply comes from a server: no MAT, speedup or drafter shares to show."""
        if self.final is not None:
            return self.final.method == REMOTE
        return REMOTE in self.by_source

    @property
    def ttft(self) -> float:
        """Seconds from the request to the first text (0 = none yet)."""
        if self.final is not None and self.final.ttft_s:
            return self.final.ttft_s
        return self.first_t - self.started if self.first_t else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Decoding speed as the engine counts it: every reply token over the time since
        decoding began (the prompt's reading left out). Where the steps are not known (a
        server's reply), the tokens after the first text over the time since it: a first text
        of many drafted tokens would otherwise be left out (0 = too early to tell)."""
        if self.final is not None:
            return self.final.tokens_per_s
        if self.decode_t and self.last_t > self.decode_t:
            return self.tokens / (self.last_t - self.decode_t)
        after, elapsed = self.tokens - self.first_tokens, self.last_t - self.first_t
        return after / elapsed if elapsed > 0 and after > 0 else 0.0

    @property
    def mat(self) -> float:
        """Mean accepted tokens per verification step (bonus token included)."""
        if self.final is not None:
            return self.final.mat
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def speedup_est(self) -> float:
        """Live estimate, priced as the engine's final figure is: tokens/s x (one plain step),
        the plain step timed in this reply, under the same load (0 = none yet). The cheapest
        step of any size, or another reply's timing, made it read wildly high or low while
        the machine was busy."""
        if self.final is not None:
            return self.final.speedup_est
        if not self.plain_steps:
            return 0.0
        return self.tokens_per_s * self.plain_forward_s / self.plain_steps

    def shares(self) -> dict[str, float]:
        """Share of all reply tokens that each drafter proposed and the model accepted."""
        counts: dict[str, int]
        total: int
        if self.final is not None:
            counts, total = self.final.accepted_by_drafter, self.final.tokens or self.tokens
        else:
            counts, total = self.by_source, self.tokens
        if not total:
            return {name: 0.0 for name in DRAFTERS}
        return {name: counts.get(name, 0) / total for name in DRAFTERS}


_CUT_SHORT = ("cancelled", "interrupted")  # finish reasons a remote reply's figures name


def format_stats(record: StoredStats | None) -> str:
    """One line of figures for a finished reply."""
    if record is None:
        return "no statistics stored"
    stats = record.reply
    head = [f"{stats.tokens} tok", f"{stats.seconds:.2f} s", f"{stats.tokens_per_s:.1f} tok/s"]
    if stats.method == REMOTE:
        cut_short = [record.finish_reason] if record.finish_reason in _CUT_SHORT else []
        return " · ".join([*head, f"first token {stats.ttft_s:.2f} s", REMOTE, *cut_short])
    parts = [*head, f"MAT {stats.mat:.2f}", f"speedup {stats.speedup_est:.2f}x"]
    accepted = stats.accepted_by_drafter
    if stats.tokens and accepted:
        parts.append(
            " ".join(f"{k} {100 * accepted.get(k, 0) / stats.tokens:.0f}%" for k in DRAFTERS)
        )
    if stats.method:
        parts.append(stats.method)
    return " · ".join(parts)
