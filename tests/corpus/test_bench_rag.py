"""`samchat bench decode --corpus DIR --rag`: the shipped document-question set, its errors, and
a short real run where every method answers from the retrieved passages identically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from samchat.bench.decode import load_questions
from samchat.cli import main

DATA = Path(__file__).resolve().parents[2] / "samchat" / "bench" / "data"


def test_the_doc_question_set_loads() -> None:
    questions = load_questions(DATA / "doc_questions.jsonl")
    assert len(questions) >= 10
    assert {q.category for q in questions} == {"quote", "paraphrase", "summary"}


def test_rag_needs_a_corpus_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bench", "decode", "--questions", str(DATA / "doc_questions.jsonl")]
    assert main([*base, "--rag"]) == 1
    assert "--rag retrieves from --corpus DIR" in capsys.readouterr().err
    assert main([*base, "--rag", "--corpus", str(tmp_path / "nope")]) == 1
    assert "is not a directory" in capsys.readouterr().err


def test_rag_run_is_lossless_and_drafts_from_the_quoted_passage(
    tmp_path: Path, default_lm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import samchat.models

    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: default_lm)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "kettle.md").write_text(
        "# Kettle\n\nThe warranty of the Aurora kettle lasts seven years from the date of "
        "purchase.\n"
    )
    (corpus / "office.md").write_text("# Office\n\nThe office moves to Building C in June.\n")
    questions = tmp_path / "q.jsonl"
    question = "How long does the Aurora kettle warranty last? Quote the sentence."
    questions.write_text(json.dumps({"question_id": 1, "category": "quote", "turns": [question]}))
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench", "decode", "--questions", str(questions), "--corpus", str(corpus), "--rag",
            "--methods", "torch:plain,torch:sam+tr", "--max-new-tokens", "24",
            # A fixed curve: whether a draft pays is then no matter of this machine's load.
            "--cost-curve", "flat", "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert data["meta"]["rag"] is True
    sam = data["torch:sam+tr"]["overall"]
    assert sam["identical"] == 1  # the same tokens as plain decoding
    assert sam["mat"] > 1.5  # the answer quotes the passage in its prompt
