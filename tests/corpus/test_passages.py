"""Splitting documents into passages, and the passages the store keeps beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.corpus.importer import import_paths
from samchat.errors import StoreError
from samchat.passages import PASSAGE_TOKENS, estimate_tokens, split_passages
from samchat.store import Store

MARKDOWN = """# Kettle

The blue kettle warranty lasts 2 years.

## Cleaning

Descale it monthly.

```sh
descale --kettle

# not a heading: inside a code block
```

# Office

The office moves to Building C.
"""


def test_markdown_splits_at_headings_and_keeps_code_blocks_whole() -> None:
    chunks = split_passages(MARKDOWN, "markdown")
    assert [(c.heading, c.text.splitlines()[0]) for c in chunks] == [
        ("Kettle", "The blue kettle warranty lasts 2 years."),
        ("Kettle › Cleaning", "Descale it monthly."),
        ("Office", "The office moves to Building C."),
    ]
    assert "# not a heading: inside a code block\n```" in chunks[1].text


def test_rst_and_plain_text() -> None:
    rst = "Guide\n=====\n\nIntro.\n\nDrafting\n--------\n\nDrafts are cheap.\n"
    assert [(c.heading, c.text) for c in split_passages(rst, "rst")] == [
        ("Guide", "Intro."),
        ("Drafting", "Drafts are cheap."),
    ]
    assert [c.text for c in split_passages("one\n\n\ntwo\n", "text")] == ["one\n\ntwo"]


def test_every_passage_is_token_bounded_and_nothing_is_lost() -> None:
    sentence = "The quick brown fox jumps over the lazy dog again and again. "
    text = "\n\n".join(sentence * n for n in (1, 3, 40, 2, 90)) + "\n\n" + "word " * 700
    chunks = split_passages(text, "text", limit=100)
    assert all(estimate_tokens(c.text) <= 100 for c in chunks)
    assert "".join(text.split()) == "".join("".join(c.text for c in chunks).split())
    assert len(split_passages(text, "text")) < len(chunks)  # the default is larger
    assert PASSAGE_TOKENS > 100


def test_store_keeps_passages_in_step(tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text(MARKDOWN)
    with Store.open(tmp_path / "db.sqlite") as store:
        first = import_paths(store, [notes]).documents[0][1]
        assert [p.heading for p in store.passages(first)] == [
            "Kettle",
            "Kettle › Cleaning",
            "Office",
        ]
        assert [h.document_id for h in store.search_passages(["warranty"], 5)] == [first]
        # Re-importing a changed file replaces the old version and its passages.
        notes.write_text(MARKDOWN.replace("2 years", "5 years"))
        summary = import_paths(store, [notes])
        second = summary.documents[0][1]
        assert summary.replaced == [first] and [d.id for d in store.documents()] == [second]
        hits = store.search_passages(["warranty"], 5)
        assert [(h.document_id, "5 years" in h.text) for h in hits] == [(second, True)]
        # Deleting the document deletes its passages and their search entries.
        store.delete_document(second)
        assert store.passage_count() == 0 and not store.search_passages(["warranty"], 5)
        store.conn.execute(
            "INSERT INTO passages_fts(passages_fts, rank) VALUES ('integrity-check', 1)"
        )
        store.conn.commit()


def test_a_failed_document_insert_leaves_no_passages(tmp_path: Path) -> None:
    with Store.open(tmp_path / "db.sqlite") as store:
        store.conn.execute(
            "CREATE TRIGGER no_office BEFORE INSERT ON passages WHEN new.text LIKE '%office%'"
            " BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
        with pytest.raises(StoreError):
            store.add_document("/n.md", "Notes", MARKDOWN, "markdown")
        assert store.documents() == [] and store.passage_count() == 0
