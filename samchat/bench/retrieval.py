"""How fast retrieval is on a large corpus: N synthetic documents (random words mixed with
common ones, so the OR-query touches many passages), then timed questions.

`python -m samchat.bench.retrieval [N]` prints the figures; tests/corpus holds the target.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from samchat.corpus.retrieval import retrieve
from samchat.store import Store

COMMON_WORDS = ("data", "system", "model", "user", "file", "network", "value", "time")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    return ["".join(rng.choices(_LETTERS, k=rng.randint(3, 9))) for _ in range(size)]


def fill(store: Store, n_docs: int, seed: int = 0) -> None:
    """Add n_docs Markdown documents of 2-6 paragraphs each, through the store's own path."""
    rng = random.Random(seed)
    words = _vocabulary(rng)
    with store.transaction():
        for i in range(n_docs):
            paragraphs = [
                " ".join(
                    rng.choice(words) if rng.random() < 0.7 else rng.choice(COMMON_WORDS)
                    for _ in range(rng.randint(30, 120))
                )
                + "."
                for _ in range(rng.randint(2, 6))
            ]
            text = f"# Document {i}\n\n" + "\n\n".join(paragraphs)
            store.add_document(f"/bench/{i}.md", f"Document {i}", text, "markdown")


def time_questions(store: Store, n_questions: int = 60, seed: int = 1) -> dict[str, float]:
    """Milliseconds per retrieval: median, 95th percentile and worst, after a warm-up."""
    rng = random.Random(seed)
    words = _vocabulary(random.Random(0))
    questions = [
        "What does " + " ".join(rng.sample(words, 4)) + " say about the data model and system?"
        for _ in range(n_questions)
    ]
    for question in questions[:5]:
        retrieve(store, question)
    times = []
    for question in questions:
        start = time.perf_counter()
        retrieve(store, question)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return {
        "median_ms": statistics.median(times),
        "p95_ms": times[int(0.95 * (len(times) - 1))],
        "max_ms": times[-1],
        "passages": float(store.passage_count()),
    }


def main(argv: list[str]) -> int:
    n_docs = int(argv[0]) if argv else 10_000
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "bench.db") as store:
        start = time.perf_counter()
        fill(store, n_docs)
        added = time.perf_counter() - start
        figures = time_questions(store)
    print(
        f"{n_docs:,} documents ({figures['passages']:,.0f} passages, stored in {added:.1f} s): "
        f"retrieval median {figures['median_ms']:.1f} ms, p95 {figures['p95_ms']:.1f} ms, "
        f"max {figures['max_ms']:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
