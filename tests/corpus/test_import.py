"""`samchat import` on real directories: formats, duplicates, skips, chats, bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pdf_sample import make_pdf
from test_chatgpt import export_with_branch

from samchat.cli import main
from samchat.corpus.importer import ImportSummary, import_paths
from samchat.errors import ImportFailed
from samchat.store import Store


def _library(root: Path) -> Path:
    lib = root / "lib"
    (lib / "sub" / "deeper").mkdir(parents=True)
    (lib / ".git").mkdir()
    (lib / "readme.md").write_text("# Readme\n\nsamchat drafts with suffix automata.\n")
    (lib / "sub" / "guide.rst").write_text("Guide\n=====\n\nThe guide explains drafting.\n")
    (lib / "sub" / "deeper" / "code.py").write_text("def draft():\n    return 'automata'\n")
    (lib / "sub" / "copy.txt").write_text("# Readme\n\nsamchat drafts with suffix automata.\n")
    (lib / "blob.bin").write_bytes(bytes(range(256)))
    (lib / "latin.txt").write_bytes("na\xefve".encode("latin-1"))
    (lib / ".git" / "config").write_text("hidden, never imported")
    make_pdf(lib / "paper.pdf", ["Automata paper text."], "Automata")
    (lib / "conversations.json").write_text(json.dumps(export_with_branch()))
    return lib


def test_import_directory(tmp_path: Path) -> None:
    lib = _library(tmp_path)
    seen: list[int] = []
    with Store.open(tmp_path / "db.sqlite") as store:
        summary = import_paths(store, [lib], progress=lambda d, t, p: seen.append(d))
        assert {p.name for p, _ in summary.documents} == {
            "readme.md", "guide.rst", "code.py", "paper.pdf", "latin.txt"
        }  # fmt: skip
        assert [p.name for p in summary.duplicates] == ["copy.txt"]
        assert {p.name: r for p, r in summary.skipped} == {"blob.bin": "binary file"}
        assert (summary.chats, summary.messages) == (1, 4)
        assert seen[-1] == 8 and seen == sorted(seen)
        kinds = {d.title: d.kind for d in store.documents()}
        assert kinds == {
            "Readme": "markdown", "Guide": "rst", "code.py": "code", "Automata": "pdf",
            "latin.txt": "text",
        }  # fmt: skip
        latin = next(d for d in store.documents() if d.title == "latin.txt")
        assert store.document_text(latin.id) == "na\xefve"  # Latin-1, detected
        chat = store.chats()[0]
        assert (chat.title, chat.source, chat.message_count) == ("SAM chat", "chatgpt:conv-1", 4)
        assert [m.content for m in store.thread(chat.id)] == [
            "What is a suffix automaton?", "The minimal automaton of suffixes.", "Thanks!"
        ]  # fmt: skip
        # Importing again adds nothing: documents by content hash, chats by conversation id.
        again = import_paths(store, [lib])
        assert not again.documents and again.chats == 0 and len(again.duplicates) == 7
        assert store.counts() == {"chats": 1, "messages": 4, "documents": 5}


def test_token_counts_and_callback(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one two three")
    got: list[tuple[int, list[int] | None]] = []
    with Store.open(tmp_path / "db.sqlite") as store:
        summary = import_paths(
            store,
            [tmp_path / "a.txt"],
            encode=lambda text: [len(w) for w in text.split()],
            on_document=lambda doc_id, tokens: got.append((doc_id, tokens)),
        )
        assert summary.tokens == 3 and got == [(1, [3, 3, 5])]
        assert store.documents()[0].token_count == 3


def test_missing_path_fails_before_importing(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("fine")
    with Store.open(tmp_path / "db.sqlite") as store:
        with pytest.raises(ImportFailed, match=r"no such file or directory: .*nope"):
            import_paths(store, [tmp_path / "a.txt", tmp_path / "nope"])
        assert store.counts()["documents"] == 0


def test_unreadable_file_is_a_skip(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "dangling.txt").symlink_to(tmp_path / "gone.txt")
    with Store.open(tmp_path / "db.sqlite") as store:
        summary = import_paths(store, [d])
    assert summary.skipped == [(d / "dangling.txt", "cannot read (No such file or directory)")]


def _cli(tmp_path: Path, *args: str) -> int:
    return main(["import", "--no-index", "--data-dir", str(tmp_path / "data"), *args])


def test_cli_bad_inputs_one_line_each(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(tmp_path, str(tmp_path / "missing")) == 1
    err = capsys.readouterr().err
    assert err.strip() == f"error: no such file or directory: {tmp_path / 'missing'}"

    bins = tmp_path / "bins"
    bins.mkdir()
    for i in range(3):
        (bins / f"f{i}.bin").write_bytes(b"\x00\x01\x02" * 10)
    assert _cli(tmp_path, str(bins)) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert [ln for ln in lines if ln.startswith("skipped")] == [
        f"skipped {bins / f'f{i}.bin'}: binary file" for i in range(3)
    ]
    assert lines[-1].startswith("imported 0 documents") and "3 skipped" in lines[-1]

    bad = tmp_path / "export" / "conversations.json"
    bad.parent.mkdir()
    bad.write_text('{"not": "a list"}')
    assert _cli(tmp_path, str(bad)) == 1
    err = capsys.readouterr().err
    assert f"skipped {bad}: malformed ChatGPT export: expected a list" in err

    noise = tmp_path / "noise.txt"
    noise.write_bytes(bytes(range(1, 256)) * 4)
    assert _cli(tmp_path, str(noise)) == 1
    assert f"skipped {noise}: not UTF-8 text (byte 0x80 at offset 127)" in capsys.readouterr().err


def test_cli_import_history_search_export_rm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lib = _library(tmp_path)
    data = ["--data-dir", str(tmp_path / "data")]
    assert _cli(tmp_path, str(lib)) == 0
    err = capsys.readouterr().err
    assert "imported 5 documents and 1 chats (4 messages)" in err and "docs/s" in err
    assert main(["history", *data]) == 0
    assert "SAM chat" in capsys.readouterr().out
    assert main(["search", "automata", *data]) == 0
    out = capsys.readouterr().out
    assert "Readme" in out and "suffix automata" in out
    assert main(["search", "zebra", *data]) == 1
    assert capsys.readouterr().err.strip() == "no matches for zebra"
    assert main(["export", "1", "--format", "md", *data]) == 0
    md = capsys.readouterr().out
    assert md.startswith("# SAM chat") and "## Assistant\n\nThe minimal automaton" in md
    assert main(["export", "1", "--format", "json", *data]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert len(exported["messages"]) == 4 and len(exported["thread"]) == 3
    assert main(["rm", "1", *data]) == 1  # no terminal to confirm on, no --yes
    assert "nothing deleted" in capsys.readouterr().err
    assert main(["rm", "1", "--yes", *data]) == 0
    assert main(["export", "1", *data]) == 1
    assert "there is no chat 1" in capsys.readouterr().err


def test_folder_imports_honour_gitignore(tmp_path: Path) -> None:
    """.gitignore files are obeyed as git does: nested ones, negations, directory patterns, and
    those above the imported folder within its repository; .git/ is never walked."""
    repo = tmp_path / "repo"
    docs = repo / "docs"
    (docs / "build" / "html").mkdir(parents=True)
    (docs / "notes" / "drafts").mkdir(parents=True)
    (repo / ".git" / "objects").mkdir(parents=True)
    (repo / ".git" / "objects" / "readme.txt").write_text("git internals, never imported")
    (repo / ".gitignore").write_text("*.log\nsecret.md\n")  # above the imported folder
    (docs / ".gitignore").write_text("build/\n!keep.log\n")
    (docs / "notes" / ".gitignore").write_text("# drafts stay private\ndrafts\n*.tmp\n")
    files = {
        "guide.md": "# Guide\n\nHow the drafting works.\n",
        "secret.md": "# Secret\n\nnot for the index\n",
        "run.log": "a log line\n",
        "keep.log": "the one log worth keeping\n",
        "build/html/index.html": "<html><body><p>generated page</p></body></html>",
        "notes/ideas.txt": "ideas about automata\n",
        "notes/scratch.tmp": "scratch\n",
        "notes/drafts/first.txt": "a first draft\n",
    }
    for name, text in files.items():
        (docs / name).write_text(text)
    with Store.open(tmp_path / "db.sqlite") as store:
        summary = import_paths(store, [docs])
        imported = {p.relative_to(docs).as_posix() for p, _ in summary.documents}
        assert imported == {"guide.md", "keep.log", "notes/ideas.txt"}
        assert not summary.skipped
        # A file named explicitly is taken, ignored or not.
        again = import_paths(store, [docs / "run.log"])
        assert [p.name for p, _ in again.documents] == ["run.log"]


def test_one_import_summary_for_the_cli_and_the_app() -> None:
    """The CLI adds tokens and speeds; both name duplicates and skipped files alike."""
    summary = ImportSummary(
        documents=[(Path("a.md"), 1), (Path("b.md"), 2)],
        duplicates=[Path("c.md")],
        skipped=[(Path("d.bin"), "binary")],
        tokens=1000,
        seconds=0.5,
    )
    tail = " (1 already imported, 1 skipped)"
    assert summary.describe() == "imported 2 documents in 0.50s" + tail
    assert summary.describe(rates=True) == (
        "imported 2 documents (1,000 tokens) in 0.50s: 4.0 docs/s, 2,000 tokens/s" + tail
    )
    one = ImportSummary(documents=[(Path("a.md"), 1)], chats=2, messages=9, seconds=1.0)
    assert one.describe() == "imported 1 document and 2 chats (9 messages) in 1.00s"
