"""Concurrent writers: imports, `samchat ask`'s path and the app's with its indexer, all on one
data directory at once."""

from __future__ import annotations

import random
from pathlib import Path

from fault_campaign.check import check_data
from fault_campaign.figures import Figures
from fault_campaign.process import Ack, Child
from fault_campaign.texts import write_sources


def writers(n: int, rounds: int, work: Path, rng: random.Random) -> Figures:
    fig = Figures(f"{n} concurrent writers (imports, ask, TUI indexer)")
    for r in range(rounds):
        data = work / f"writers-{n}-{r}"
        data.mkdir(parents=True)
        children = []
        sources: dict[str, str] = {}
        for i in range(n):
            role = ("import", "ask", "tui", "import")[i % 4]
            seed = str(rng.randrange(10**9))
            if role == "import":
                src = data / f"src{i}"
                sources |= write_sources(src, rng, 12)
                children.append(Child.program("import_documents", str(data), seed, str(src)))
            elif role == "ask":
                children.append(Child.program("ask_questions", str(data), seed, "15"))
            else:
                children.append(Child.program("tui_replies", str(data), seed, "15"))
        acks: list[Ack] = []
        for child in children:
            if child.wait(600) != 0:
                fig.note(f"round {r}: a writer failed: {child.stderr()[-300:]}")
            acks += child.acks
        fig.injected += 1
        fig.committed += len([a for a in acks if a.kind != "idx"])
        result = check_data(data, acks, sources)
        fig.lost += result.lost
        for p in result.problems:
            fig.note(f"round {r}: {p}")
        if not result.problems and not result.lost:
            fig.recovered += 1
    return fig
