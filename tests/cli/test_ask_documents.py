"""`samchat ask` with documents: --docs retrieval, -f attachments, piped stdin, --json, fitting
into the context, and bad input refused in one line before anything is saved."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from samchat.cli import main
from samchat.figures import StoredStats
from samchat.store import Store

FACT = "The warranty of the Aurora kettle lasts seven years from the date of purchase."
NOTES = f"# Kitchen notes\n\n{FACT}\n\n# Office\n\nThe office moves to Building C in June.\n"
QUESTION = "How long does the Aurora kettle warranty last? Quote the sentence."


def _errors(capsys: pytest.CaptureFixture[str]) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("error:")]


def test_bad_sources_are_refused_before_anything_is_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "big.txt").write_text("many words " * 250_000)  # 2.6 MB
    data = ["--data-dir", str(tmp_path / "data")]
    cases = {
        ("-f", str(tmp_path / "missing.md")): "missing.md: no such file",
        ("-f", str(tmp_path / "blob.bin")): "blob.bin: binary file",
        ("-f", str(tmp_path / "big.txt")): "limit for attachments",
        ("--docs",): "no imported documents to search; run `samchat import PATH` first",
    }
    for args, problem in cases.items():
        assert main(["ask", *args, *data, "What is in it?"]) == 1
        [line] = _errors(capsys)
        assert problem in line
    with Store.open(tmp_path / "data" / "samchat.db") as store:
        assert store.counts()["chats"] == 0  # no question was saved without its answer


@pytest.mark.model
def test_the_answer_quotes_a_fact_only_the_imported_file_holds(
    default_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import samchat.models

    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: default_lm)
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text(NOTES)
    (docs / "other.txt").write_text("Kettles boil water. Teapots brew tea.\n")
    data = ["--data-dir", str(tmp_path / "data")]
    assert main(["import", "--no-index", str(docs), *data]) == 0
    capsys.readouterr()
    # Without the documents the model cannot know it.
    base = ["--max-new-tokens", "40", "--method", "plain", *data]
    assert main(["ask", "--json", "--no-save", *base, QUESTION]) == 0
    assert "seven years" not in json.loads(capsys.readouterr().out)["text"]

    assert main(["ask", "--docs", "--json", *base, QUESTION]) == 0
    out = capsys.readouterr().out
    answer = json.loads(out)
    assert {"text", "stats", "sources"} <= set(answer)
    assert "seven years" in answer["text"]
    source = answer["sources"][0]  # the best passage first; other.txt mentions kettles too
    assert source["title"] == "Kitchen notes" and source["path"].endswith("notes.md")
    with Store.open(tmp_path / "data" / "samchat.db") as store:
        [chat] = store.chats()
        assert chat.title == QUESTION[:59] + "…" or chat.title == QUESTION
        question, reply = store.thread(chat.id)
        # The saved question shows what the model was given; the reply names its sources.
        assert FACT in question.content and question.content.endswith(QUESTION)
        assert reply.stats is not None
        assert [s.to_dict() for s in reply.stats.sources] == answer["sources"]
        passage = store.passages(source["document_id"])[0]
        assert passage.id == source["passage_id"] and FACT in passage.text
    # config.toml's [documents] sizes what goes in: with no relevance cut, the weaker passages
    # about kettles join the answering one; a bad value is one line, before anything runs.
    config = Path(os.environ["SAMCHAT_CONFIG_DIR"]) / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("[documents]\nrelevance = 0.0\n")
    assert main(["ask", "--docs", "--json", "--no-save", *base, QUESTION]) == 0
    every = json.loads(capsys.readouterr().out)["sources"]
    assert len(every) > len(answer["sources"]) and every[0] == source
    # ... and what this machine reads within [documents] wait: at a measured 1 token a second
    # (a slow reply of this model in the store), the answering passage alone.
    with Store.open(tmp_path / "data" / "samchat.db") as store:
        [chat] = store.chats()
        last = store.thread(chat.id)[-1].id
        slow = StoredStats.parse({"prompt_tokens": 1000, "reused_tokens": 0, "prefill_s": 1000.0})
        store.add_message(chat.id, "assistant", "slow", last, model=default_lm.name, stats=slow)
    assert main(["ask", "--docs", "--json", "--no-save", *base, QUESTION]) == 0
    assert json.loads(capsys.readouterr().out)["sources"] == [source]
    config.write_text("[documents]\npassages = 0\n")
    assert main(["ask", "--docs", "--no-save", *base, QUESTION]) == 1
    [line] = _errors(capsys)
    assert "[documents] passages must be a whole number of 1 or more, not 0" in line


@pytest.mark.model
def test_piped_stdin_and_attached_files_reach_the_model(
    default_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import samchat.models

    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: default_lm)
    notes = tmp_path / "notes.md"
    notes.write_text(NOTES)
    piped = tmp_path / "piped.txt"
    piped.write_text(FACT + "\n")
    base = ["--max-new-tokens", "40", "--method", "plain", "--no-save", "--json"]
    with piped.open() as stdin:  # as `samchat ask … < piped.txt` (a file, like a pipe, is read)
        monkeypatch.setattr("sys.stdin", stdin)
        assert main(["ask", *base, QUESTION]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert "seven years" in answer["text"]
    assert answer["sources"] == [
        {"title": "stdin", "path": None, "passage_id": None, "document_id": None}
    ]
    monkeypatch.undo()
    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: default_lm)
    assert main(["ask", *base, "-f", str(notes), QUESTION]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert "seven years" in answer["text"]
    assert [s["path"] for s in answer["sources"]] == [str(notes)]


@pytest.mark.model
def test_an_attachment_larger_than_the_context_is_cut_with_a_notice(
    default_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import samchat.models
    from samchat.models.loader import LoadedModel

    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: default_lm)
    # A 1,024-token window (of the model's 8,192) keeps the prefill short on a CPU.
    monkeypatch.setattr(LoadedModel, "context_limit", property(lambda self: 1024))
    long = tmp_path / "long.txt"
    long.write_text("The kettle is blue. " * 1000)  # about 5,000 tokens
    short = tmp_path / "short.txt"
    short.write_text(FACT)
    args = ["ask", "--no-save", "--max-new-tokens", "2", "--method", "plain"]
    assert main([*args, "-f", str(long), "-f", str(short), "What colour is it?"]) == 0
    notices = [line for line in capsys.readouterr().err.splitlines() if "fit" in line]
    assert len(notices) == 2, notices
    assert notices[0].startswith("[cut long.txt") and "of its 5,00" in notices[0]
    assert notices[1] == (
        f"[left out 1 source that did not fit the model's context: short.txt ({short})]"
    )
