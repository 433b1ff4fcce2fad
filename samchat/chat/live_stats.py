"""Running figures for one streaming reply: tokens/s, MAT, speedup, drafter shares, speed trace.

Pure Python (no textual, no torch) so it is cheap to test. The engine's figures (the reply's
StoredStats) replace the live estimates when the reply finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from samchat.figures import ReplyStats, StoredStats
from samchat.names import DRAFTERS
from samchat.remote import REMOTE


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
    final: ReplyStats | None = None  # the engine's figures, once done

    def on_delta(self, n_tokens: int, sources: list[str], t: float) -> None:
        prev = self.last_t or self.started
        self.first_t = self.first_t or t
        self.tokens += n_tokens
        for src in sources:
            self.by_source[src] = self.by_source.get(src, 0) + 1
        if t > prev and n_tokens:
            self.speeds.append(n_tokens / (t - prev))
        self.last_t = t

    def on_step(self, forward_s: float, plain: bool = False) -> None:
        self.steps += 1
        self.forward_s += forward_s
        if plain and forward_s > 0:
            self.plain_forward_s += forward_s
            self.plain_steps += 1

    def on_done(self, stats: StoredStats) -> None:
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
        if self.final is not None:
            return self.final.tokens_per_s
        elapsed = self.last_t - self.started
        return self.tokens / elapsed if elapsed > 0 else 0.0

    @property
    def mat(self) -> float:
        """Mean accepted tokens per verification step (bonus token included)."""
        if self.final is not None:
            return self.final.mat
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def speedup_est(self) -> float:
        """Live estimate: tokens x (one plain step) / time spent verifying, the plain step timed
        in this reply, under the same load (0 = none yet). The cheapest step of any size, or
        another reply's timing, made it read wildly high or low while the machine was busy."""
        if self.final is not None:
            return self.final.speedup_est
        if not self.forward_s or not self.plain_steps:
            return 0.0
        return self.tokens * (self.plain_forward_s / self.plain_steps) / self.forward_s

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
