"""The store on real SQLite files: chats, branches, stats, documents, search, file safety."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from samchat.errors import StoreError
from samchat.figures import ReplyStats, StoredStats
from samchat.store import Store

FIGURES = ReplyStats(
    tokens=40, seconds=2.0, tokens_per_s=20.0, steps=16, mat=2.5,
    accepted_by_drafter={"dyn": 10, "tr": 4}, speedup_est=1.7, prefill_s=0.1, ttft_s=0.2,
)  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "samchat.db")
    yield s
    s.close()


def test_file_is_private_wal_with_foreign_keys(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "samchat.db"
    with Store.open(path) as s:
        s.create_chat("t")
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        for p in (path, Path(f"{path}-wal")):
            assert stat.S_IMODE(os.stat(p).st_mode) == 0o600, p


def test_branches_thread_and_siblings(store: Store) -> None:
    chat = store.create_chat("branches", "m", "be brief")
    q = store.add_message(chat, "user", "question", None)
    a1 = store.add_message(chat, "assistant", "first answer", q)
    f1 = store.add_message(chat, "user", "follow-up", a1)
    a2 = store.add_message(chat, "assistant", "regenerated answer", q)  # newest branch
    assert [m.id for m in store.thread(chat)] == [q, a2]
    # Picking the older sibling continues down its own newest descendants.
    assert [m.id for m in store.thread(chat, a1)] == [q, a1, f1]
    assert [m.id for m in store.siblings(a2)] == [a1, a2]
    assert [m.id for m in store.siblings(q)] == [q]
    assert [m.id for m in store.children(q)] == [a1, a2]
    assert store.conversation(chat, f1) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "user", "content": "follow-up"},
    ]


def test_branch_navigation_and_a_conversation_up_to_its_leaf(store: Store) -> None:
    """What the chat service and the app move between branches with, and what a reply to a
    message follows: the branch down to that message, not past it to the replies it has."""
    chat = store.create_chat("branches", "m", "be brief")
    q = store.add_message(chat, "user", "question", None)
    a1 = store.add_message(chat, "assistant", "first answer", q)
    f1 = store.add_message(chat, "user", "follow-up", a1)
    a2 = store.add_message(chat, "assistant", "regenerated answer", q)
    a3 = store.add_message(chat, "assistant", "third answer", q)
    assert store.conversation(chat, q) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "question"},
    ]
    assert store.conversation(chat) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "third answer"},
    ]
    assert store.branches(store.thread(chat, a1)) == {a1: (1, 3)}
    assert store.branches(store.thread(chat, a3)) == {a3: (3, 3)}
    assert store.branches([]) == {}
    assert [store.sibling(a1, 1), store.sibling(a1, -1), store.sibling(a3, 1)] == [a2, a3, a1]
    assert store.sibling(q, 1) is None and store.sibling(f1, -1) is None


def _columns(store: Store, message_id: int) -> tuple[object, ...]:
    return tuple(
        store.conn.execute(
            "SELECT tokens, seconds, steps, mat, speedup, accepted_by_drafter FROM messages"
            " WHERE id = ?",
            (message_id,),
        ).fetchone()
    )


def test_a_reply_record_is_kept_whole_and_its_main_figures_in_columns(store: Store) -> None:
    chat = store.create_chat("s")
    q = store.add_message(chat, "user", "q", None)
    record = StoredStats(FIGURES, "eos")
    a = store.add_message(chat, "assistant", "a", q, "m", record, finish_reason="eos")
    row = store.message(a)
    assert row.stats == record and row.finish_reason == "eos"
    assert _columns(store, a) == (40, 2.0, 16, 2.5, 1.7, '{"dyn": 10, "tr": 4}')
    # An older row's JSON: read leniently ("speedup" is a key since dropped).
    b = store.add_message(chat, "assistant", "b", q, stats=StoredStats.parse({"tokens": 3}))
    assert _columns(store, b)[0] == 3
    assert store.message(q).stats is None
    with pytest.raises(TypeError):
        store.add_message(chat, "assistant", "c", q, stats=42)  # type: ignore[arg-type]


def test_chats_newest_first_rename_prompt_delete(store: Store) -> None:
    old = store.create_chat("old")
    new = store.create_chat("new")
    store.add_message(old, "user", "bump", None)  # activity moves a chat to the top
    assert [c.id for c in store.chats()] == [old, new]
    assert store.chats()[0].message_count == 1
    store.rename_chat(new, "renamed")
    store.set_system_prompt(new, "you are terse")
    assert (store.chat(new).title, store.chat(new).system_prompt) == ("renamed", "you are terse")
    store.delete_chat(old)
    assert store.counts()["messages"] == 0  # cascaded
    with pytest.raises(StoreError, match="no chat"):
        store.chat(old)


def test_bad_writes_are_store_errors(store: Store) -> None:
    chat = store.create_chat("a")
    other = store.create_chat("b")
    m = store.add_message(other, "user", "x", None)
    with pytest.raises(StoreError, match="role"):
        store.add_message(chat, "robot", "x", None)
    with pytest.raises(StoreError, match="not in chat"):
        store.add_message(chat, "assistant", "x", m)
    with pytest.raises(StoreError, match="no chat"):
        store.add_message(999, "user", "x", None)
    assert store.counts()["messages"] == 1


def test_documents_dedup_and_fts_search(store: Store) -> None:
    text = "The software comes with NO WARRANTY at all."
    d = store.add_document("/a.txt", "A", text, "text")
    assert d is not None
    assert store.add_document("/b.txt", "B", text, "text") is None
    chat = store.create_chat("licensing talk")
    store.add_message(chat, "user", "Is there a warranty on this program?", None)
    store.add_message(chat, "user", "unrelated words", None)
    hits = store.search("warranty")
    assert {(h.kind, h.title) for h in hits} == {("document", "A"), ("message", "licensing talk")}
    doc_hit = next(h for h in hits if h.kind == "document")
    assert "[WARRANTY]" in doc_hit.snippet and doc_hit.source == "/a.txt"
    # Porter stemming: "warranties" finds "warranty"; user text is not FTS syntax.
    assert len(store.search("warranties")) == 2
    assert store.search('NOT "unbalanced') == []
    assert [h.kind for h in store.search("warranty", kinds=("message",))] == ["message"]
    with pytest.raises(StoreError, match="cannot parse"):
        store.search('"unbalanced', raw=True)
    store.delete_document(d)
    assert [h.kind for h in store.search("warranty")] == ["message"]


def test_edits_are_searchable(store: Store) -> None:
    chat = store.create_chat("c")
    m = store.add_message(chat, "user", "alpha", None)
    store.conn.execute("UPDATE messages SET content = 'omega' WHERE id = ?", (m,))
    store.conn.commit()
    assert store.search("alpha") == [] and len(store.search("omega")) == 1


def test_index_keys_and_texts(store: Store) -> None:
    chat = store.create_chat("c", system_prompt="sys")
    store.add_message(chat, "system", "system text is not indexed", None)
    u = store.add_message(chat, "user", "hello", None)
    d = store.add_document("/x", "X", "doc text", "text")
    assert store.index_keys() == {f"msg:{u}", f"doc:{d}"}
    assert store.text_for_key(f"msg:{u}") == "hello"
    assert store.text_for_key(f"doc:{d}") == "doc text"
    assert store.text_for_key("msg:9999") is None and store.text_for_key("bogus") is None


def test_directory_as_database_path(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="directory"):
        Store.open(tmp_path)


def test_unusable_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The data directory is resolved once, by the command: one line whether it came from the
    environment or from --data-dir, and nothing else is tried."""
    from samchat.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SAMCHAT_DATA_DIR", str(blocker / "data"))
    assert main(["history"]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r"error: cannot use the data directory .*file/data: .*--data-dir\n", err)
    monkeypatch.delenv("SAMCHAT_DATA_DIR")
    assert main(["history", "--data-dir", str(blocker / "other")]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r"error: cannot use the data directory .*file/other: .*--data-dir\n", err)


def test_prefill_speed_is_the_median_of_recent_long_reads_of_that_model(store: Store) -> None:
    """What [documents] wait prices retrieved text with: this machine's own prompt reads of a
    model (new tokens over their seconds); short reads, other models and rows without
    figures do not count."""
    chat = store.create_chat("t", "m", None)
    q = store.add_message(chat, "user", "q", None)

    def reply(model: str, **stats: object) -> None:
        store.add_message(chat, "assistant", "a", q, model=model, stats=StoredStats.parse(stats))

    assert store.prefill_speed("m") is None
    reply("m", prompt_tokens=1000, reused_tokens=0, prefill_s=10.0)  # 100 tokens/s
    reply("m", prompt_tokens=1300, reused_tokens=300, prefill_s=5.0)  # 1000 new: 200/s
    reply("m", prompt_tokens=900, reused_tokens=0, prefill_s=3.0)  # 300/s
    reply("m", prompt_tokens=100, reused_tokens=0, prefill_s=0.01)  # too short to count
    reply("m", prompt_tokens="many", prefill_s=1.0)  # unreadable figures are skipped
    reply("other", prompt_tokens=1000, reused_tokens=0, prefill_s=1.0)
    store.add_message(chat, "assistant", "a", q, model="m")  # no figures (a remote reply)
    assert store.prefill_speed("m") == pytest.approx(200.0)
    assert store.prefill_speed("other") == pytest.approx(1000.0)
    assert store.prefill_speed("m", recent=1) == pytest.approx(300.0)  # the latest alone
