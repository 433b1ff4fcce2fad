"""The whole campaign: every scenario in order, from one seed."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

from fault_campaign.base import build_base
from fault_campaign.db_corruption import db_corruption
from fault_campaign.figures import Figures
from fault_campaign.full_disk import full_disk
from fault_campaign.index_corruption import index_corruption
from fault_campaign.kills import kill_campaign, real_ask_kills
from fault_campaign.writers import writers


def campaign(
    *,
    kills: int,
    corruptions: int,
    real_asks: int,
    disk_runs: int,
    writer_rounds: int,
    seed: int,
    work: Path,
    real_cli: bool = True,
    log: Callable[[str], None] = lambda s: None,
) -> list[Figures]:
    """Every scenario in turn, its figures in the order docs/reliability.md lists them; `log`
    gets a line as each ends."""
    rng = random.Random(seed)
    figures: list[Figures] = []

    def run(fig: Callable[[], Figures]) -> None:
        start = time.monotonic()
        result = fig()
        result.notes = (result.notes + f" {time.monotonic() - start:.0f}s").strip()
        figures.append(result)
        log(f"{result.scenario}: {result.injected} faults, {result.lost} committed rows lost")

    per = max(kills // 4, 1)
    run(
        lambda: kill_campaign(
            "import", "import_documents", per, work, rng, max_delay=1.0, import_files=60
        )
    )
    run(lambda: kill_campaign("ask", "ask_questions", per, work, rng, max_delay=0.5))
    run(lambda: kill_campaign("tui", "tui_replies", per, work, rng, max_delay=0.5))
    run(lambda: kill_campaign("index", "index_flushes", kills - 3 * per, work, rng, max_delay=1.5))
    if real_asks:
        run(lambda: real_ask_kills(real_asks, work, rng))
    base = work / "base"
    build_base(base, rng)
    db_trials = max(corruptions * 2 // 3, 1)
    start = time.monotonic()
    for part in db_corruption(db_trials, work, base, rng):
        part.notes = f"{time.monotonic() - start:.0f}s (both)"
        figures.append(part)
        log(f"{part.scenario}: {part.injected} faults, {part.detected} detected")
    run(lambda: index_corruption(corruptions - db_trials, work, base, rng))
    if disk_runs:
        run(lambda: full_disk(disk_runs, work, rng, real_cli))
    for n in (2, 4):
        run(lambda n=n: writers(n, writer_rounds, work, rng))  # type: ignore[misc]
    return figures
