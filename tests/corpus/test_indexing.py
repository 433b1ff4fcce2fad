"""The static index follows the store: imports, chat turns, deletions, corruption, a new
tokenizer, and a background thread. Uses the real StaticIndex with a byte-level encoder."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from samchat.chat.service import ChatService, ReplyRecord
from samchat.corpus.importer import import_paths
from samchat.corpus.indexing import BackgroundIndexer, IndexManager, drop_from_indexes
from samchat.sam.index import StaticIndex
from samchat.store import Store
from tests.fakes import stored_stats

SEP = 0


def encode(text: str) -> list[int]:
    return [b + 1 for b in text.encode()]  # never the separator 0


def draft_after(index: StaticIndex, prefix: str, n: int) -> str:
    cur = index.cursor()
    for t in encode(prefix):
        cur.feed(t)
    return bytes(t - 1 for t in cur.draft(n) if t > 0).decode(errors="replace")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "samchat.db")
    yield s
    s.close()


def manager(store: Store, root: Path, fingerprint: str = "fp-bytes") -> IndexManager:
    return IndexManager(store, fingerprint, encode, SEP, root=root)


def test_sync_follows_documents_turns_and_deletes(store: Store, tmp_path: Path) -> None:
    (tmp_path / "doc.txt").write_text("the quick brown fox jumps over the lazy dog")
    import_paths(store, [tmp_path / "doc.txt"])
    service = ChatService(store)
    reply = service.send("tell me about zebra crossings", chat_id=None, parent_id=None, model="m")
    service.finish(
        reply, ReplyRecord("zebra crossings have white stripes", "stop", stored_stats(6))
    )
    m = manager(store, tmp_path / "index")
    result = m.open()
    assert (result.added, result.removed) == (3, 0)
    idx = m.index
    assert idx.document_ids() == store.index_keys() == {"doc:1", "msg:1", "msg:2"}
    assert draft_after(idx, "quick brown", 10) == " fox jumps"
    assert draft_after(idx, "zebra crossings have", 7) == " white "
    assert store.documents()[0].token_count == len("the quick brown fox jumps over the lazy dog")
    # Deleting the chat stops drafting from it, without a tokenizer (as `samchat rm` does).
    keys = {f"msg:{msg.id}" for msg in store.messages(reply.chat_id or 0)}
    store.delete_chat(reply.chat_id or 0)
    assert drop_from_indexes(store, keys, root=tmp_path / "index") == 2
    m.close()
    m = manager(store, tmp_path / "index")
    assert m.open().added == 0
    assert m.index.document_ids() == {"doc:1"}
    assert "white" not in draft_after(m.index, "zebra crossings have", 7)
    m.close()


def test_stale_entries_go_on_next_sync(store: Store, tmp_path: Path) -> None:
    d = store.add_document("/a", "A", "alpha beta gamma", "text")
    m = manager(store, tmp_path / "index")
    m.open()
    store.delete_document(d or 0)  # e.g. deleted by a process that did not touch the index
    assert m.sync().removed == 1 and m.index.document_ids() == set()
    assert m.status()["stale"] == 0
    m.close()


def test_corrupt_index_is_rebuilt_from_the_store(store: Store, tmp_path: Path) -> None:
    store.add_document("/a", "A", "some words to index here", "text")
    m = manager(store, tmp_path / "index")
    m.open()
    m.close()
    seg = next((tmp_path / "index" / "fp-bytes").glob("*.sam"))
    seg.write_bytes(seg.read_bytes()[:40])  # truncated
    m = manager(store, tmp_path / "index")
    result = m.open()
    assert result.rebuilt and result.added == 1
    assert draft_after(m.index, "words to", 6) == " index"
    m.close()


def test_new_tokenizer_builds_its_own_index(store: Store, tmp_path: Path) -> None:
    store.add_document("/a", "A", "one two three", "text")
    first = manager(store, tmp_path / "index", "fp-one")
    first.open()
    seen: list[tuple[int, int]] = []
    second = manager(store, tmp_path / "index", "fp-two")
    assert second.open(lambda done, total, what: seen.append((done, total))).added == 1
    assert seen[0] == (0, 1) and seen[-1] == (1, 1)
    assert {fp for fp, _, _ in store.indexes()} == {"fp-one", "fp-two"}
    first.close()
    second.close()


def test_background_indexer(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    with Store.open(path) as store:
        store.add_document("/a", "A", "background indexing works", "text")
    errors: list[Exception] = []
    bg = BackgroundIndexer(path, "fp-bg", encode, SEP, root=tmp_path / "index",
                           on_error=errors.append).start()  # fmt: skip
    assert bg.ready.wait(30) and bg.wait_idle(30)
    assert bg.index is not None and bg.index.document_ids() == {"doc:1"}
    with Store.open(path) as store:  # the UI thread has its own connection
        service = ChatService(store)
        reply = service.send("hello there", chat_id=None, parent_id=None, model="m")
        service.finish(reply, ReplyRecord("general kenobi", "stop", stored_stats()))
    bg.poke()
    assert bg.wait_idle(30)
    with bg.lock:
        assert bg.index.document_ids() == {"doc:1", "msg:1", "msg:2"}
        assert draft_after(bg.index, "general", 7) == " kenobi"
    bg.stop()
    assert not errors and threading.active_count() >= 1
