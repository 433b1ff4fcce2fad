"""The static index: round trips, appends, removal, compaction and corruption."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sam_reference import longest_match

import samchat.sam.index as index_module
import samchat.sam.index_files as index_files_module
import samchat.sam.index_writes as index_writes_module
import samchat.sam.segments as segments_module
from samchat.errors import IndexCorruptError, SamchatError
from samchat.sam.index import MAX_SEGMENTS, StaticIndex

SEP = 0
FP = "tokenizer-a"


@pytest.fixture(autouse=True)
def _both_backends(sam_mod: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every index test runs on the compiled core and on the pure one."""
    for module in (index_module, index_files_module, index_writes_module, segments_module):
        monkeypatch.setattr(module, "impl", sam_mod)


def live_text(docs: dict[str, list[int]]) -> list[int]:
    out: list[int] = []
    for toks in docs.values():
        out += [*toks, SEP]
    return out


def occurs_in_some(docs: dict[str, list[int]], seq: list[int]) -> bool:
    m = len(seq)
    return any(toks[i : i + m] == seq for toks in docs.values() for i in range(len(toks) - m + 1))


def continues_live(docs: dict[str, list[int]], query: list[int], ln: int, seq: list[int]) -> bool:
    """seq follows some suffix of the match (drafts may fall back to a shorter match)."""
    return any(occurs_in_some(docs, query[len(query) - k :] + seq) for k in range(1, ln + 1))


def check_cursor(index: StaticIndex, docs: dict[str, list[int]], query: list[int]) -> None:
    """Exact longest match over the live documents; every draft continues a live document."""
    cur = index.cursor()
    cur.feed_many(query)
    ln = cur.match_len
    assert ln == longest_match(live_text(docs), query)
    base = query[len(query) - ln :]
    seq = cur.draft(6)
    assert SEP not in seq
    if seq:
        assert continues_live(docs, query, ln, seq)
    tokens, parents = cur.draft_tree(12, 4, 2)
    for i in range(len(tokens)):
        path, j = [], i
        while j != -1:
            path.append(tokens[j])
            j = parents[j]
        assert occurs_in_some(docs, base + path[::-1])


doc_tokens = st.lists(st.integers(1, 4), min_size=1, max_size=25)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batches=st.lists(st.lists(doc_tokens, min_size=1, max_size=3), min_size=1, max_size=4),
    queries=st.lists(st.lists(st.integers(1, 5), max_size=8), min_size=1, max_size=4),
    tail=st.lists(doc_tokens, max_size=2),
)
def test_segments_tail_and_reload_answer_exactly(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[list[list[int]]],
    queries: list[list[int]],
    tail: list[list[int]],
) -> None:
    d = tmp_path_factory.mktemp("ix")
    index = StaticIndex.open(d, FP, SEP)
    docs: dict[str, list[int]] = {}
    for b, batch in enumerate(batches):
        for k, toks in enumerate(batch):
            docs[f"{b}-{k}"] = toks
            index.add_document(f"{b}-{k}", toks)
        index.flush()
    for k, toks in enumerate(tail):
        docs[f"t-{k}"] = toks
        index.add_document(f"t-{k}", toks)
    assert index.document_ids() == set(docs)
    for q in queries:
        check_cursor(index, docs, q)
    # The tail is not persisted until flush(); segments are.
    reopened = StaticIndex.open(d, FP, SEP)
    persisted = {k: v for k, v in docs.items() if not k.startswith("t-")}
    assert reopened.document_ids() == set(persisted)
    for q in queries:
        check_cursor(reopened, persisted, q)
    reopened.warm()  # copies the mapped arrays into native ones: same answers
    assert all(seg.views is None for seg in reopened.segments)
    for q in queries:
        check_cursor(reopened, persisted, q)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    all_docs=st.lists(doc_tokens, min_size=2, max_size=8),
    remove=st.lists(st.integers(0, 7), max_size=4),
    queries=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=8), min_size=1, max_size=4),
)
def test_removed_documents_never_draft(
    tmp_path_factory: pytest.TempPathFactory,
    all_docs: list[list[int]],
    remove: list[int],
    queries: list[list[int]],
) -> None:
    d = tmp_path_factory.mktemp("ix")
    index = StaticIndex.open(d, FP, SEP)
    docs = {f"d{i}": t for i, t in enumerate(all_docs)}
    for i, (k, t) in enumerate(docs.items()):
        index.add_document(k, t)
        if i % 3 == 2:
            index.flush()
    cursor = index.cursor()
    for r in remove:
        key = f"d{r}"
        index.remove_document(key)
        docs.pop(key, None)
    assert index.document_ids() == set(docs)
    for q in queries:
        # A cursor made before the removal obeys it at once, and drafts only live text.
        cursor.reset()
        cursor.feed_many(q)
        assert cursor.match_len <= longest_match(live_text(docs), q)
        seq = cursor.draft(6)
        if seq:
            assert continues_live(docs, q, cursor.match_len, seq)
    index.compact()
    assert index.stats()["segments"] <= 1 and index.stats()["removed"] == 0
    for q in queries:
        check_cursor(index, docs, q)
    reopened = StaticIndex.open(d, FP, SEP)
    assert reopened.document_ids() == set(docs)
    for q in queries:
        check_cursor(reopened, docs, q)


def test_ties_go_to_more_occurrences(tmp_path: Path) -> None:
    index = StaticIndex.open(tmp_path, FP, SEP)
    index.add_document("once", [5, 6, 7])
    index.flush()
    index.add_document("twice-a", [5, 6, 8])
    index.add_document("twice-b", [5, 6, 8])
    index.flush()
    cur = index.cursor()
    cur.feed_many([5, 6])
    assert (cur.match_len, cur.segment, cur.occurrences) == (2, 1, 2)
    assert cur.draft(1) == [8]
    twin = cur.copy()
    cur.feed(7)  # only the first segment continues
    assert (cur.match_len, cur.segment) == (3, 0)
    assert (twin.match_len, twin.segment, twin.draft(1)) == (2, 1, [8])  # unaffected


def test_too_many_segments_are_merged(tmp_path: Path) -> None:
    index = StaticIndex.open(tmp_path, FP, SEP)
    rng = random.Random(1)
    docs = {}
    for i in range(3 * MAX_SEGMENTS):
        docs[f"d{i}"] = [rng.randrange(1, 50) for _ in range(30)]
        index.add_document(f"d{i}", docs[f"d{i}"])
        index.flush()
        assert index.stats()["segments"] <= MAX_SEGMENTS
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == index.stats()["segments"] + 1  # + manifest, no leftovers
    reopened = StaticIndex.open(tmp_path, FP, SEP)
    assert reopened.document_ids() == set(docs)
    for toks in docs.values():
        check_cursor(reopened, docs, toks[3:12])


def test_replacing_a_document(tmp_path: Path) -> None:
    index = StaticIndex.open(tmp_path, FP, SEP)
    index.add_document("chat", [1, 2, 3, 4])
    index.flush()
    index.add_document("chat", [1, 2, 9, 9])  # an edited chat replaces the old copy
    index.flush()
    cur = index.cursor()
    cur.feed_many([1, 2])
    assert cur.draft(2) == [9, 9]
    assert index.stats()["documents"] == 1


def test_bad_documents_are_refused(tmp_path: Path) -> None:
    index = StaticIndex.open(tmp_path, FP, SEP)
    with pytest.raises(SamchatError, match="separator"):
        index.add_document("x", [1, SEP, 2])
    with pytest.raises(SamchatError, match="out of range"):
        index.add_document("x", [1, -4])
    assert index.document_ids() == set()


def _one_segment(tmp_path: Path) -> Path:
    index = StaticIndex.open(tmp_path, FP, SEP)
    index.add_document("a", list(range(1, 200)))
    index.flush()
    index.close()
    (seg,) = tmp_path.glob("*.sam")
    return seg


def _header(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    _, _, hlen, _ = segments_module._PREFIX.unpack_from(data)
    header: dict[str, Any] = json.loads(
        data[segments_module._PREFIX.size : segments_module._PREFIX.size + hlen]
    )
    return header


def _array_offset(path: Path, name: str) -> int:
    (entry,) = [e for e in _header(path)["arrays"] if e["name"] == name]
    return int(entry["offset"])


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda p: p.write_bytes(p.read_bytes()[:-10]), "truncated"),
        (lambda p: p.write_bytes(p.read_bytes()[:12]), "truncated"),
        (lambda p: _flip(p, p.stat().st_size - 3), r"checksum of hub_dst differs"),
        (lambda p: _flip(p, _array_offset(p, "text") + 5), r"checksum of text differs"),
        (lambda p: _flip(p, _array_offset(p, "link") + 9), r"checksum of link differs"),
        (lambda p: _flip(p, 30), "corrupt header"),
        (lambda p: _flip(p, 2), "not a samchat index"),
        (lambda p: p.unlink(), "cannot be read"),
    ],
)
def test_damaged_segments_are_detected(tmp_path: Path, damage: object, message: str) -> None:
    seg = _one_segment(tmp_path)
    damage(seg)  # type: ignore[operator]
    with pytest.raises(IndexCorruptError, match=message):
        StaticIndex.open(tmp_path, FP, SEP)


def test_other_tokenizer_or_bad_manifest(tmp_path: Path) -> None:
    _one_segment(tmp_path)
    with pytest.raises(IndexCorruptError, match="another tokenizer"):
        StaticIndex.open(tmp_path, "tokenizer-b", SEP)
    with pytest.raises(IndexCorruptError, match="separator"):
        StaticIndex.open(tmp_path, FP, 1)
    manifest = tmp_path / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(data)[:-5])
    with pytest.raises(IndexCorruptError, match="unreadable"):
        StaticIndex.open(tmp_path, FP, SEP)


def test_recreate_after_corruption_keeps_other_files(tmp_path: Path) -> None:
    seg = _one_segment(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    _flip(seg, seg.stat().st_size - 3)
    with pytest.raises(IndexCorruptError):
        StaticIndex.open(tmp_path, FP, SEP)
    index = StaticIndex.recreate(tmp_path, "tokenizer-b", SEP)
    assert index.document_ids() == set()
    assert (tmp_path / "notes.txt").read_text() == "mine"
    index.add_document("a", [3, 4, 5])
    index.flush()
    assert StaticIndex.open(tmp_path, "tokenizer-b", SEP).document_ids() == {"a"}


def test_orphan_segment_from_interrupted_flush_is_ignored(tmp_path: Path) -> None:
    seg = _one_segment(tmp_path)
    (tmp_path / "seg-999999.sam").write_bytes(seg.read_bytes())
    (tmp_path / "seg-000005.sam.tmp").write_bytes(b"half")
    index = StaticIndex.open(tmp_path, FP, SEP)
    assert index.stats()["segments"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json", seg.name]


@pytest.mark.parametrize("big", [False, True])
def test_wide_and_narrow_token_ids(tmp_path: Path, big: bool) -> None:
    """Ids above 65535 keep 32-bit token arrays; smaller ones are stored in 16 bits."""
    top = 70_000 if big else 60_000
    rng = random.Random(5)
    docs = {f"d{i}": [rng.choice([1, 2, top - i]) for _ in range(60)] for i in range(5)}
    index = StaticIndex.open(tmp_path, FP, SEP)
    for k, t in docs.items():
        index.add_document(k, t)
    index.flush()
    raw = (tmp_path / index.segments[0].name).read_bytes()
    header = json.loads(raw[segments_module._PREFIX.size :].split(b"}]}", 1)[0] + b"}]}")
    types = {e["name"]: e["type"] for e in header["arrays"]}
    assert types["text"] == types["etok"] == ("i32" if big else "u16")
    assert types["link"] == "i32"
    reopened = StaticIndex.open(tmp_path, FP, SEP)
    queries = [t[10:20] for t in docs.values()] + [[top, top - 1, 2]]
    for q in queries:
        check_cursor(reopened, docs, q)
    reopened.warm()
    for q in queries:
        check_cursor(reopened, docs, q)


def test_warm_in_a_thread_while_querying(tmp_path: Path) -> None:
    import threading

    rng = random.Random(9)
    docs = {f"d{i}": [rng.randrange(1, 300) for _ in range(400)] for i in range(20)}
    index = StaticIndex.open(tmp_path, FP, SEP)
    for k, t in docs.items():
        index.add_document(k, t)
    index.flush()
    index = StaticIndex.open(tmp_path, FP, SEP)
    old = index.cursor()
    worker = threading.Thread(target=index.warm)
    worker.start()
    for t in docs.values():
        check_cursor(index, docs, t[50:70])
    worker.join()
    index.remove_document("d3")
    del docs["d3"]
    for t in docs.values():
        check_cursor(index, docs, t[50:70])
    old.feed_many(docs["d0"][:5])  # a cursor from before still works
    assert old.match_len == 5


def test_unwritable_places_give_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SamchatError, match="cannot create the static index directory"):
        StaticIndex.open(blocker / "index", FP, SEP)

    index = StaticIndex.open(tmp_path / "ix", FP, SEP)
    index.add_document("a", [1, 2, 3, 4])

    def disk_full(*args: object, **kwargs: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(index_writes_module, "write_segment", disk_full)
    with pytest.raises(SamchatError, match="No space left on device"):
        index.flush()
    # Nothing was lost and the index still works: the tail keeps growing and flushes later.
    assert index.document_ids() == {"a"}
    index.add_document("b", [1, 2, 9])
    monkeypatch.undo()
    index.flush()
    reopened = StaticIndex.open(tmp_path / "ix", FP, SEP)
    assert reopened.document_ids() == {"a", "b"}
    check_cursor(reopened, {"a": [1, 2, 3, 4], "b": [1, 2, 9]}, [1, 2])
