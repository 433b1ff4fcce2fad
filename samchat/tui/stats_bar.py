"""The live statistics bar: tokens/s, MAT, speedup, drafter shares and a speed sparkline."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Sparkline, Static

from samchat.tui.live_stats import DRAFTERS, LiveStats
from samchat.tui.messages import PROVENANCE_STYLES

SPARK_POINTS = 60


def stats_content(stats: LiveStats, status: str) -> Content:
    shares = stats.shares()
    parts: list[str | tuple[str, str]] = [
        (f"{stats.tokens_per_s:6.1f}", "bold"),
        " tok/s  MAT ",
        (f"{stats.mat:4.2f}", "bold"),
        "  speedup ",
        (f"{stats.speedup:4.2f}x", "bold $success" if stats.speedup >= 1 else "bold $warning"),
        "  accepted ",
    ]
    for name in DRAFTERS:
        parts.append((f"{name} {100 * shares[name]:3.0f}% ", f"bold {PROVENANCE_STYLES[name]}"))
    parts.append(f" {stats.tokens} tok  {status}")
    return Content.assemble(*parts)


class StatsBar(Horizontal):
    """Shows the reply that is streaming, or the last one."""

    def compose(self) -> ComposeResult:
        yield Static("no reply yet", id="stats-text")
        yield Sparkline([], id="stats-spark", summary_function=max)

    def show(self, stats: LiveStats, status: str) -> None:
        self.query_one("#stats-text", Static).update(stats_content(stats, status))
        self.query_one("#stats-spark", Sparkline).data = stats.speeds[-SPARK_POINTS:]

    def clear(self) -> None:
        self.query_one("#stats-text", Static).update("no reply yet")
        self.query_one("#stats-spark", Sparkline).data = []
