"""Running figures for one streaming reply: tokens/s, MAT, speedup, drafter shares, speed trace.

Pure Python (no textual, no torch) so it is cheap to test. The engine's ReplyStats replaces the
live estimates when the reply finishes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from samchat.remote import REMOTE

DRAFTERS = ("dyn", "static", "tr")


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
    final: dict[str, Any] | None = None  # the engine's ReplyStats as a dict, once done

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

    def on_done(self, stats: dict[str, Any]) -> None:
        self.final = stats

    @property
    def remote(self) -> bool:
        """The reply comes from a server: no MAT, speedup or drafter shares to show."""
        if self.final is not None:
            return self.final.get("method") == REMOTE
        return REMOTE in self.by_source

    @property
    def ttft(self) -> float:
        """Seconds from the request to the first text (0 = none yet)."""
        if self.final is not None and self.final.get("ttft_s"):
            return float(self.final["ttft_s"])
        return self.first_t - self.started if self.first_t else 0.0

    @property
    def tokens_per_s(self) -> float:
        if self.final is not None:
            return float(self.final.get("tokens_per_s", 0.0))
        elapsed = self.last_t - self.started
        return self.tokens / elapsed if elapsed > 0 else 0.0

    @property
    def mat(self) -> float:
        """Mean accepted tokens per verification step (bonus token included)."""
        if self.final is not None:
            return float(self.final.get("mat", 0.0))
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def speedup(self) -> float:
        """Live estimate: tokens x (one plain step) / time spent verifying, the plain step timed
        in this reply, under the same load (0 = none yet). The cheapest step of any size, or
        another reply's timing, made it read 15.6x or 0.08x while the machine was busy."""
        if self.final is not None:
            return float(self.final.get("speedup_est", 0.0))
        if not self.forward_s or not self.plain_steps:
            return 0.0
        return self.tokens * (self.plain_forward_s / self.plain_steps) / self.forward_s

    def shares(self) -> dict[str, float]:
        """Share of all reply tokens that each drafter proposed and the model accepted."""
        counts: dict[str, int]
        total: int
        if self.final is not None and self.final.get("accepted_by_drafter") is not None:
            counts = {k: int(v) for k, v in self.final["accepted_by_drafter"].items()}
            total = int(self.final.get("tokens", 0)) or self.tokens
        else:
            counts, total = self.by_source, self.tokens
        if not total:
            return {name: 0.0 for name in DRAFTERS}
        return {name: counts.get(name, 0) / total for name in DRAFTERS}


_CUT_SHORT = ("cancelled", "interrupted")  # finish reasons a remote reply's figures name


def format_stats(stats: dict[str, Any]) -> str:
    """One line of figures for a finished reply."""
    if not stats:
        return "no statistics stored"
    if stats.get("method") == REMOTE:
        return " · ".join(
            [
                f"{int(stats.get('tokens', 0))} tok",
                f"{float(stats.get('seconds', 0.0)):.2f} s",
                f"{float(stats.get('tokens_per_s', 0.0)):.1f} tok/s",
                f"first token {float(stats.get('ttft_s', 0.0)):.2f} s",
                REMOTE,
            ]
            + [str(stats["finish_reason"])] * (stats.get("finish_reason") in _CUT_SHORT)
        )
    parts = [
        f"{int(stats.get('tokens', 0))} tok",
        f"{float(stats.get('seconds', 0.0)):.2f} s",
        f"{float(stats.get('tokens_per_s', 0.0)):.1f} tok/s",
        f"MAT {float(stats.get('mat', 0.0)):.2f}",
        f"speedup {float(stats.get('speedup_est', 0.0)):.2f}x",
    ]
    accepted = stats.get("accepted_by_drafter") or {}
    total = int(stats.get("tokens", 0))
    if total and accepted:
        parts.append(
            " ".join(f"{k} {100 * int(accepted.get(k, 0)) / total:.0f}%" for k in DRAFTERS)
        )
    if stats.get("method"):
        parts.append(str(stats["method"]))
    return " · ".join(parts)
