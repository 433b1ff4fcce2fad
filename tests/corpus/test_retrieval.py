"""Retrieval over imported passages, attachments, and fitting sources into the context."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.corpus.importer import import_paths
from samchat.corpus.retrieval import (
    CUT_MARK,
    DocumentError,
    Source,
    compose,
    fit,
    query_terms,
    read_attachment,
    retrieve,
    split_content,
    within,
)
from samchat.corpus.rule import RetrievalRule
from samchat.errors import SamchatError
from samchat.passages import estimate_tokens
from samchat.store import Store


def _words(text: str) -> int:
    return len(text.split())


def _corpus(root: Path) -> Path:
    docs = root / "docs"
    docs.mkdir()
    (docs / "kettle.md").write_text(
        "# Kettle\n\nThe blue kettle warranty lasts 2 years.\n\n# Colour\n\nIt is blue.\n"
    )
    (docs / "office.txt").write_text("The office moves to Building C in June.\n")
    license_text = "Permission is hereby granted, free of charge, to any person.\n"
    (docs / "LICENSE").write_text(license_text)
    (docs / "sub").mkdir()
    (docs / "sub" / "LICENSE.txt").write_text(license_text + "\n")  # same words, other hash
    return docs


def test_retrieve_ranks_dedupes_and_names_sources(tmp_path: Path) -> None:
    docs = _corpus(tmp_path)
    with Store.open(tmp_path / "db.sqlite") as store:
        import_paths(store, [docs])
        found = retrieve(store, "How long is the kettle warranty?")
        assert [(s.title, s.heading, s.text) for s in found] == [
            ("Kettle", "Kettle", "The blue kettle warranty lasts 2 years.")
        ]
        assert found[0].path == str((docs / "kettle.md").resolve())
        assert found[0].ref().to_dict() == {
            "title": "Kettle",
            "path": found[0].path,
            "passage_id": found[0].passage_id,
            "document_id": found[0].document_id,
        }
        licenses = retrieve(store, "who is granted permission?")
        assert len(licenses) == 1  # the same text in two files is retrieved once
        assert retrieve(store, "zebra") == []
        # estimated tokens; every passage's relevance kept
        within = retrieve(store, "blue office kettle", RetrievalRule(relevance=0.0, tokens=10))
        assert [s.text for s in within] == ["The blue kettle warranty lasts 2 years."]


def test_passages_far_below_the_best_stay_out(tmp_path: Path) -> None:
    """The relevance cut: passages scoring under `relevance` x the best stay out, whatever
    the count and token limits allow; 0 keeps them all, 1 the best alone (and its ties)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "pump.md").write_text(
        "# Pump\n\nThe pump valve seal and the pump valve spring wear out; replace the valve.\n"
    )
    for i in range(5):  # each mentions one of the words once, among many others
        filler = " ".join(f"word{i}x{j}" for j in range(60))
        (docs / f"other{i}.md").write_text(f"# Other {i}\n\n{filler} valve {filler}\n")
    question = "Which pump valve parts wear out?"
    with Store.open(tmp_path / "db.sqlite") as store:
        import_paths(store, [docs])
        everything = retrieve(store, question, RetrievalRule(relevance=0.0))
        assert len(everything) == 6 and everything[0].title == "Pump"
        assert [s.title for s in retrieve(store, question)] == ["Pump"]  # the default cut
        assert [s.title for s in retrieve(store, question, RetrievalRule(relevance=1.0))] == [
            "Pump"
        ]
        two = retrieve(store, question, RetrievalRule(relevance=0.0, passages=2))
        assert [s.title for s in two] == ["Pump", everything[1].title]


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"relevance": 1.5}, "relevance must be from 0 to 1, not 1.5"),
        ({"relevance": "high"}, "relevance must be a number from 0 to 1"),
        ({"passages": 0}, "passages must be a whole number of 1 or more, not 0"),
        ({"tokens": 2.5}, "tokens must be a whole number of 1 or more, not 2.5"),
        ({"passage": 3}, "has no key 'passage'; the keys are passages, relevance, tokens, wait"),
        ({"wait": -1}, "wait must be a number of seconds, 0 or more (0: no limit), not -1"),
        ({"wait": "8s"}, "wait must be a number of seconds, 0 or more"),
        ([1], "[documents] must be a table"),
    ],
)
def test_a_bad_documents_table_is_one_line(table: object, problem: str) -> None:
    with pytest.raises(SamchatError) as exc:
        RetrievalRule.from_mapping(table)
    assert problem in str(exc.value) and "\n" not in str(exc.value)
    assert RetrievalRule.from_mapping({"relevance": 0, "tokens": 800}) == RetrievalRule(0.0, 6, 800)
    assert RetrievalRule.from_mapping({"wait": 0}).wait == 0.0


def test_retrieved_text_is_what_the_machine_reads_within_the_wait(tmp_path: Path) -> None:
    """[documents] wait: at the measured prefill speed, retrieval adds what is read in `wait`
    seconds (the best passage always); no measurement yet, or wait 0, keeps the token limit."""
    rule = RetrievalRule(relevance=0.0, tokens=1200, wait=8.0)
    assert rule.token_limit(None) == 1200 and rule.token_limit(100.0) == 800
    assert rule.token_limit(1000.0) == 1200 and RetrievalRule(wait=0).token_limit(10.0) == 1200
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(6):
        body = " ".join(f"pump{i}word{j}" for j in range(40))
        (docs / f"pump{i}.md").write_text(f"# Pump {i}\n\nThe pump valve {i}. {body}\n")
    with Store.open(tmp_path / "db.sqlite") as store:
        import_paths(store, [docs])
        every = retrieve(store, "pump valve", rule)
        size = estimate_tokens(every[0].text)
        two = retrieve(store, "pump valve", rule, prefill_tps=(2 * size + 1) / rule.wait)
        assert len(every) == 6 and [s.text for s in two] == [s.text for s in every[:2]]
        slow = retrieve(store, "pump valve", rule, prefill_tps=0.01)
        assert [s.text for s in slow] == [every[0].text]  # the best one, however slow
        assert within(every, 2 * size + 1) == every[:2]


def test_query_terms_drop_common_words() -> None:
    assert query_terms("What is the WARRANTY of the kettle, and why? 2") == [
        "warranty",
        "kettle",
        "2",
    ]


def test_empty_corpus_is_a_clear_error(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db.sqlite") as store, pytest.raises(DocumentError) as exc:
        retrieve(store, "anything")
    assert "samchat import" in str(exc.value)


def test_attachments_refuse_bad_files(tmp_path: Path) -> None:
    good = tmp_path / "notes.md"
    good.write_text("# Notes\n\nhello\n")
    assert read_attachment(good) == Source("Notes", str(good), "# Notes\n\nhello\n")
    (tmp_path / "blob").write_bytes(b"\x00\x01\x02" * 10)
    (tmp_path / "big.txt").write_text("x" * 2000)
    (tmp_path / "empty.txt").write_text("")
    cases = {
        tmp_path / "nope.txt": "no such file",
        tmp_path / "blob": "binary file",
        tmp_path / "big.txt": "limit for attachments",
        tmp_path / "empty.txt": "empty file",
        tmp_path: "directory",
    }
    for path, problem in cases.items():
        with pytest.raises(DocumentError, match=problem):
            read_attachment(path, max_bytes=1000)


def test_compose_and_split_round_trip() -> None:
    sources = [Source("A", "/a.md", "alpha"), Source("stdin", None, "beta")]
    content = compose("What?", sources)
    assert content.endswith("Question: What?") and "[1] A (/a.md)\nalpha" in content
    question, block = split_content(content)
    assert question == "What?" and block is not None and "[2] stdin\nbeta" in block
    assert split_content("plain question") == ("plain question", None)
    assert compose("What?", []) == "What?"


def test_fit_cuts_with_a_notice_and_never_overflows() -> None:
    sources = [
        Source("A", "/a", "one two three"),
        Source("B", "/b", " ".join(f"w{i}" for i in range(200))),
        Source("C", "/c", "never fits"),
    ]

    def prompt_tokens(content: str) -> int:
        return _words(content) + 5  # the template around the message

    fitted = fit("Why?", sources, prompt_tokens=prompt_tokens, count=_words, limit=100)
    assert [s.title for s in fitted.sources] == ["A", "B"]
    assert fitted.sources[1].text.endswith(CUT_MARK)
    assert prompt_tokens(fitted.content) <= 100
    assert len(fitted.notices) == 2
    assert fitted.notices[0].startswith("cut B (/b) to about")
    assert fitted.notices[1] == "left out 1 source that did not fit the model's context: C (/c)"
    everything = fit("Why?", sources, prompt_tokens=prompt_tokens, count=_words, limit=10_000)
    assert everything.sources == sources and not everything.notices
