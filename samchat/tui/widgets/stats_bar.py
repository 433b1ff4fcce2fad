"""The live statistics bar: tokens/s, MAT, speedup, drafter shares and a speed sparkline."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.content import Content
from textual.widgets import Sparkline, Static

from samchat.chat.live_stats import LiveStats
from samchat.chat.record import TRACE_POINTS
from samchat.names import DRAFTERS
from samchat.remote import REMOTE
from samchat.tui.widgets.message_view import PROVENANCE_STYLES

SPARK_POINTS = TRACE_POINTS  # the live sparkline shows what a stored reply keeps


def stats_content(stats: LiveStats, status: str) -> Content:
    if stats.remote:  # the server decodes: how fast, and how soon, is all we know
        return Content.assemble(
            (f"{stats.tokens_per_s:.1f}", "bold"),
            " tok/s · first token ",
            (f"{stats.ttft:.2f} s", "bold"),
            " · ",
            (REMOTE, "bold"),
            f" · {stats.tokens} tok · {status}",
        )
    shares = stats.shares()
    speedup = stats.speedup_est
    if speedup > 0:
        shown = (f"{speedup:.2f}x", "bold $success" if speedup >= 1 else "bold $warning")
    else:
        shown = ("–", "bold")  # no plain step timed in this reply yet
    parts: list[str | tuple[str, str]] = [
        (f"{stats.tokens_per_s:.1f}", "bold"),
        " tok/s · MAT ",
        (f"{stats.mat:.2f}", "bold"),
        " · ",
        shown,
        " · ",
    ]
    for name in DRAFTERS:
        parts.append((f"{name} {100 * shares[name]:.0f}% ", f"bold {PROVENANCE_STYLES[name]}"))
    parts.append(f"· {stats.tokens} tok · {status}")
    return Content.assemble(*parts)


class StatsBar(Horizontal):
    """Shows the reply that is streaming, or the last one."""

    def compose(self) -> ComposeResult:
        yield Static(
            "tok/s · MAT · speedup · accepted by drafter (dyn/static/tr) · tokens", id="stats-text"
        )
        yield Sparkline([], id="stats-spark", summary_function=max)

    def on_mount(self) -> None:
        self.query_one("#stats-spark").display = False

    def show(self, stats: LiveStats, status: str) -> None:
        # A line of fixed size: no layout of the screen for it, once a frame while streaming.
        self.query_one("#stats-text", Static).update(stats_content(stats, status), layout=False)
        spark = self.query_one("#stats-spark", Sparkline)
        spark.data = stats.speeds[-SPARK_POINTS:]
        spark.display = bool(spark.data)
