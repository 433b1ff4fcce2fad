"""`samchat db recover` salvages every row that is not on a damaged page (real SQLite files)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from samchat.cli import main
from samchat.corpus.indexing import IndexManager
from samchat.errors import StoreError
from samchat.figures import StoredStats
from samchat.store import Store, deep_check, recover
from samchat.store import recovery as recovery_module

N_DOCS = 14
N_TURNS = 300  # a question and a reply each


def _encode(text: str) -> list[int]:
    return [b + 1 for b in text.encode()]


def _build(path: Path) -> dict[str, dict[int, tuple[object, ...]]]:
    """A store with documents and one long branching chat; returns its rows per table."""
    with Store.open(path) as store:
        for i in range(N_DOCS):
            text = f"document {i} " + "lorem ipsum dolor " * (40 + 30 * i)
            store.add_document(f"/src/d{i}.txt", f"D{i}", text, "text")
        chat = store.create_chat("long chat", "m")
        parent = None
        for i in range(N_TURNS):
            question = store.add_message(chat, "user", f"question {i} " * 8, parent)
            parent = store.add_message(chat, "assistant", f"answer {i} " * 8, question)
            if i % 50 == 49:  # a second branch here and there
                store.add_message(chat, "assistant", f"other answer {i}", question)
        other = store.create_chat("short chat")
        store.add_message(other, "user", "hello there", None)
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return {t: _rows(store.conn, t) for t in ("chats", "messages", "documents")}


def _rows(conn: sqlite3.Connection, table: str) -> dict[int, tuple[object, ...]]:
    return {int(r[0]): tuple(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY id")}


def _leaf_pages(path: Path, table: str) -> dict[int, int]:
    """Leaf pages of a table's b-tree and how many rows each holds (read from the file)."""
    conn = sqlite3.connect(path)
    root = int(
        conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    )
    conn.close()
    data = path.read_bytes()
    size = int.from_bytes(data[16:18], "big")
    size = 65536 if size == 1 else size
    leaves: dict[int, int] = {}
    stack = [root]
    while stack:
        page = stack.pop()
        base = (page - 1) * size
        head = base + (100 if page == 1 else 0)
        kind, cells = data[head], int.from_bytes(data[head + 3 : head + 5], "big")
        if kind == 13:
            leaves[page] = cells
        else:
            assert kind == 5, f"page {page} of {table} is not a table b-tree page"
            stack.append(int.from_bytes(data[head + 8 : head + 12], "big"))
            for i in range(cells):
                ptr = int.from_bytes(data[head + 12 + 2 * i : head + 14 + 2 * i], "big")
                stack.append(int.from_bytes(data[base + ptr : base + ptr + 4], "big"))
    return leaves


def _damage(path: Path, page: int, offset: int, rng: random.Random, size: int = 64) -> None:
    data = bytearray(path.read_bytes())
    start = (page - 1) * 4096 + offset
    data[start : start + size] = bytes(rng.randrange(256) for _ in range(size))
    path.write_bytes(bytes(data))


def _pick(pages: dict[int, int], which: str) -> int:
    ordered = sorted(pages)
    return {"first": ordered[0], "middle": ordered[len(ordered) // 2], "last": ordered[-1]}[which]


@pytest.mark.parametrize(
    ("table", "which", "offset"),
    [
        ("messages", "first", 0),
        ("messages", "middle", 0),
        ("messages", "last", 0),
        ("messages", "middle", 5),
        ("documents", "first", 0),
        ("documents", "last", 3),
    ],
)
def test_one_damaged_page_loses_only_its_rows(
    tmp_path: Path, table: str, which: str, offset: int
) -> None:
    path = tmp_path / "samchat.db"
    before = _build(path)
    leaves = _leaf_pages(path, table)
    assert len(leaves) >= 2, "the table should span several pages"
    page = _pick(leaves, which)
    on_page = leaves[page]
    _damage(path, page, offset, random.Random(page))
    hint = r"corrupt.*samchat db recover.*damaged file is kept"
    with Store.open(path) as store, pytest.raises(StoreError, match=hint):
        for key in store.index_keys():  # every text, by id, as the indexer reads them
            store.text_for_key(key)

    result = recover(path)

    assert result.moved_to.exists()
    for name, rows in before.items():
        report = result.tables[name]
        assert report.known == len(rows)  # "of N" counts the rows the indexes still list
        if name == table:
            assert len(rows) - on_page <= report.saved < len(rows)
        else:
            assert report.saved == len(rows)
    with Store.open(path) as store:
        assert deep_check(store.conn) == "ok"
        for name in before:
            after = _rows(store.conn, name)
            assert len(after) == result.tables[name].saved
            for rowid, row in after.items():  # what is saved is what was stored
                if name == "messages" and row[2] != before[name][rowid][2]:
                    assert (
                        row[2] is None
                        and row[:2] + row[3:] == before[name][rowid][:2] + (before[name][rowid][3:])
                    )
                else:
                    assert row == before[name][rowid]
        if table == "documents":
            lost = set(before["documents"]) - set(_rows(store.conn, "documents"))
            hits = store.conn.execute(
                "SELECT rowid FROM documents_fts WHERE documents_fts MATCH 'lorem'"
            )
            found = {int(r[0]) for r in hits}
            assert found and not found & lost


def test_damage_at_random_offsets_costs_at_most_the_page(tmp_path: Path) -> None:
    rng = random.Random(17)
    for attempt in range(4):
        path = tmp_path / f"try{attempt}" / "samchat.db"
        path.parent.mkdir()
        before = _build(path)
        leaves = _leaf_pages(path, "messages")
        page = rng.choice(sorted(leaves))
        _damage(path, page, rng.randrange(0, 4096 - 64), rng)
        result = recover(path)
        assert result.tables["messages"].saved >= len(before["messages"]) - leaves[page]
        assert result.tables["documents"].saved == N_DOCS
        with Store.open(path) as store:
            assert deep_check(store.conn) == "ok"


def test_lost_chat_row_keeps_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    before = _build(path)
    (page,) = _leaf_pages(path, "chats")
    _damage(path, page, 0, random.Random(1))
    result = recover(path)
    assert result.tables["chats"].saved == 0 and result.tables["chats"].known == 2
    assert result.tables["messages"].saved == len(before["messages"])
    assert "made up" in result.summary()
    with Store.open(path) as store:
        chats = {c.id: c for c in store.chats()}
        assert set(chats) == {1, 2} and chats[1].title == "recovered chat 1"
        assert len(store.thread(1)) == 2 * N_TURNS


def test_a_damaged_json_value_is_cleared_and_its_row_kept(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    before = _build(path)
    with Store.open(path) as store:
        # As zeroed bytes read from a truncated page would look: not JSON any more.
        store.conn.execute("UPDATE messages SET stats = ? WHERE id = 2", ("{\x00\x00",))
        store.conn.commit()
    result = recover(path)
    assert result.tables["messages"].saved == len(before["messages"])
    assert result.tables["messages"].cleared == 1 and "damaged value cleared" in result.summary()
    with Store.open(path) as store:
        reply = store.message(2)
        assert reply.stats is None and reply.content == before["messages"][2][4]
        assert len(store.messages(1)) == 2 * N_TURNS + N_TURNS // 50


def test_recover_drops_the_static_index_and_it_rebuilds(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    _build(path)
    root = tmp_path / "index"
    with Store.open(path) as store:
        manager = IndexManager(store, "fp", _encode, 0, root=root)
        manager.open()
        manager.close()
    leaves = _leaf_pages(path, "documents")
    _damage(path, _pick(leaves, "first"), 0, random.Random(3))
    result = recover(path, root)
    assert result.index_dropped == root and not root.exists()
    with Store.open(path) as store:
        # A new document takes the id of a lost one: the index must hold its text, not the old.
        new_id = store.add_document("/new", "New", "brand new text", "text")
        assert new_id is not None
        manager = IndexManager(store, "fp", _encode, 0, root=root)
        assert manager.open().added == len(store.index_keys())
        assert manager.index.document_ids() == store.index_keys()
        manager.close()


def test_interrupted_recover_leaves_the_damaged_file_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "samchat.db"
    _build(path)
    _damage(path, _pick(_leaf_pages(path, "messages"), "middle"), 0, random.Random(5))
    original = path.read_bytes()

    def boom(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(recovery_module, "_salvage", boom)
    with pytest.raises(KeyboardInterrupt):
        recover(path)
    assert path.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samchat.db"]


def test_recover_refuses_a_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    with Store.open(path) as store:
        store.conn.execute("INSERT INTO schema_version VALUES (999, 0)")
        store.conn.commit()
    with pytest.raises(StoreError, match="newer"):
        recover(path)
    assert path.exists() and not list(tmp_path.glob("*.corrupt-*"))


def test_check_finds_a_text_that_integrity_check_cannot(tmp_path: Path) -> None:
    path = tmp_path / "samchat.db"
    _build(path)
    with Store.open(path) as store:
        # As a flipped byte inside a stored text would: the row changes, its FTS entry not.
        store.conn.execute("PRAGMA writable_schema = ON")
        store.conn.execute("DROP TRIGGER messages_au")
        store.conn.execute("UPDATE messages SET content = 'qxzzy' WHERE id = 7")
        store.conn.commit()
        assert store.integrity_check() == "ok"
        assert "messages_fts" in deep_check(store.conn)


def test_cli_reports_counts_and_keeps_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "samchat.db"
    before = _build(path)
    leaves = _leaf_pages(path, "messages")
    page = _pick(leaves, "middle")
    _damage(path, page, 0, random.Random(9))
    assert main(["db", "check", "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
    assert "fresh" not in err and "damaged file" in err
    assert main(["db", "recover", "--data-dir", str(tmp_path)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    n = len(before["messages"])
    assert f"recovered 2 of 2 chats, {n - leaves[page]:,} of {n:,} messages" in err
    assert f"{N_DOCS} of {N_DOCS} documents" in err and "damaged file is kept at" in err
    assert main(["db", "check", "--data-dir", str(tmp_path)]) == 0


def test_damaged_text_and_json_that_sqlite_still_reads_are_one_line_errors(tmp_path: Path) -> None:
    """Bytes damaged inside a row SQLite can still read: statistics that no longer parse read as
    none, and text that is no longer UTF-8 is a StoreError pointing at recover, not a crash."""
    path = tmp_path / "samchat.db"
    with Store.open(path) as store:
        chat = store.create_chat("t", None)
        first = store.add_message(chat, "user", "question", None)
        reply = store.add_message(
            chat, "assistant", "answer", first, stats=StoredStats.parse({"tokens": 3})
        )
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE messages SET stats = '{\"tok', accepted_by_drafter = '[1' WHERE id = ?", (reply,)
    )
    conn.execute("UPDATE messages SET content = CAST(x'fffe41' AS TEXT) WHERE id = ?", (first,))
    conn.commit()
    conn.close()
    with Store.open(path) as store:
        row = store.message(reply)
        assert row.content == "answer" and row.stats is None
        with pytest.raises(StoreError, match=r"is corrupt \(Could not decode.*samchat db recover"):
            store.message(first)
