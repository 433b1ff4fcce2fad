"""What a scenario counts (Figures), and the campaign's table of them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Figures:
    scenario: str
    injected: int = 0
    detected: int = 0  # corruptions: noticed by samchat before any damaged data was used
    harmless: int = 0  # corruptions that changed no stored data (free space, padding)
    silent: int = 0  # corruptions that changed data without being noticed
    recovered: int = 0  # faults after which everything was usable again
    committed: int = 0  # rows acknowledged before the faults (kills, full disk, writers)
    lost: int = 0  # committed rows missing afterwards
    rows_before: int = 0  # corruptions: rows in the database before
    rows_saved: int = 0  # corruptions: rows `db recover` saved unchanged
    rows_altered: int = 0  # corruptions: rows saved with different content
    over_page_bound: int = 0  # leaf or overflow page damaged: more lost than the page held
    unbounded: int = 0  # recoveries after damage to an interior or schema page (no bound)
    unclean: int = 0  # detected as an unexpected error rather than a one-line one
    problems: list[str] = field(default_factory=list)
    notes: str = ""

    def note(self, problem: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(problem)


def markdown(figures: list[Figures]) -> str:
    """The figures as docs/reliability.md's table."""
    head = (
        "| scenario | faults | detected | harmless | silent | recovered | committed rows"
        " | committed rows lost | rows `db recover` saved | lost more than the damaged page held"
        " | time, notes |\n"
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--|\n"
    )
    lines = []
    for f in figures:
        corrupt = f.scenario.startswith("corruption")
        detected = f"{f.detected}" + (f" ({f.unclean} unclean)" if f.unclean else "")
        saved = f"{f.rows_saved:,} of {f.rows_before:,}" if f.rows_before else ""
        bound = f"{f.over_page_bound} ({f.unbounded} interior or schema page)" if saved else ""
        lines.append(
            f"| {f.scenario} | {f.injected} | {detected if corrupt or f.detected else ''}"
            f" | {f.harmless if corrupt else ''} | {f.silent if corrupt else ''}"
            f" | {f.recovered} | {f.committed if not corrupt else ''}"
            f" | {f.lost if not corrupt else ''} | {saved} | {bound} | {f.notes} |"
        )
    return head + "\n".join(lines) + "\n"
