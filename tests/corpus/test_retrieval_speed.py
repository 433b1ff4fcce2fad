"""Retrieval at scale finds the passage a question is about. How fast it does so is measured by
`python -m samchat.bench.retrieval` (docs/documents.md), never asserted here: machines differ."""

from __future__ import annotations

import random
from pathlib import Path

from samchat.bench.retrieval import COMMON_WORDS, fill
from samchat.corpus.retrieval import retrieve
from samchat.store import Store


def test_retrieval_in_a_large_corpus_finds_the_passage_asked_about(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db.sqlite") as store:
        fill(store, 3_000)
        assert store.passage_count() > 3_000
        rng = random.Random(3)
        for doc in rng.sample(store.documents(), 10):
            # Three rare words of one paragraph (one passage): few other passages hold all three.
            paragraph = store.document_text(doc.id).split("\n\n")[1]
            rare = sorted({w for w in paragraph.split() if len(w) > 6 and w not in COMMON_WORDS})
            question = "What does the text say about " + " ".join(rng.sample(rare, 3)) + "?"
            found = retrieve(store, question)
            assert doc.id in [s.document_id for s in found[:2]], question
