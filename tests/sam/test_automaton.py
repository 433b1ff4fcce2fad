"""The suffix automaton and its cursor against brute force, on both backends."""

from __future__ import annotations

import random
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sam_reference import alive_match, draft, draft_tree, ends, longest_match

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
small_text = st.lists(st.integers(0, 3), max_size=60)
small_query = st.lists(st.integers(0, 4), max_size=14)


def feed(mod: ModuleType, sam: Any, query: list[int], stop: int = -1) -> Any:
    cur = mod.MatchCursor(sam, stop)
    for t in query:
        cur.feed(t)
    return cur


@SETTINGS
@given(text=small_text, query=small_query, frozen=st.booleans())
def test_match_len_end_pos_and_count(
    sam_mod: ModuleType, text: list[int], query: list[int], frozen: bool
) -> None:
    sam = sam_mod.build(text, freeze=frozen)
    cur = feed(sam_mod, sam, query)
    ln = longest_match(text, query)
    assert cur.match_len == ln
    if ln:
        occ = ends(text, query[len(query) - ln :])
        assert cur.end_pos == occ[0]
        assert cur.occurrences == len(occ)
    else:
        assert cur.end_pos == 0 and cur.occurrences == 0


@SETTINGS
@given(text=small_text, query=small_query, n=st.integers(0, 8), stop=st.sampled_from([-1, 3]))
def test_sequence_draft(
    sam_mod: ModuleType, text: list[int], query: list[int], n: int, stop: int
) -> None:
    sam = sam_mod.build(text, freeze=True)
    assert feed(sam_mod, sam, query, stop).draft(n) == draft(text, query, n, stop)


def test_draft_near_a_document_end_keeps_the_long_match(sam_mod: ModuleType) -> None:
    """Issue 13's probe: ten matched tokens followed by [20, 21] and the document's end must not
    give way to what followed a one-token match elsewhere ([30..37])."""
    sep = 99
    text = [19, *range(30, 39), sep, *range(10, 20), 20, 21, sep]
    sam = sam_mod.build(text, freeze=True)
    cur = feed(sam_mod, sam, list(range(10, 20)), sep)
    assert cur.match_len == 10
    assert cur.draft(8) == [20, 21]


@SETTINGS
@given(text=small_text, query=small_query, n=st.integers(1, 8), stop=st.sampled_from([-1, 3]))
def test_draft_never_contradicts_the_longest_match(
    sam_mod: ModuleType, text: list[int], query: list[int], n: int, stop: int
) -> None:
    """Whatever shorter matches a draft falls back to, it starts with what followed the longest
    match's first occurrence (brute force), up to the separator."""
    ln = longest_match(text, query)
    got = feed(sam_mod, sam_mod.build(text, freeze=True), query, stop).draft(n)
    if ln == 0:
        assert got == []
        return
    e = ends(text, query[len(query) - ln :])[0]
    own: list[int] = []
    while len(own) < n and e + len(own) < len(text) and text[e + len(own)] != stop:
        own.append(text[e + len(own)])
    assert got[: len(own)] == own


@SETTINGS
@given(
    text=small_text,
    query=small_query,
    nodes=st.integers(0, 12),
    depth=st.integers(0, 5),
    topk=st.integers(0, 3),
    frozen=st.booleans(),
)
def test_tree_draft(
    sam_mod: ModuleType,
    text: list[int],
    query: list[int],
    nodes: int,
    depth: int,
    topk: int,
    frozen: bool,
) -> None:
    sam = sam_mod.build(text, freeze=frozen)
    tokens, parents = feed(sam_mod, sam, query, 2).draft_tree(nodes, depth, topk)
    assert (tokens, parents) == draft_tree(text, query, nodes, depth, topk, stop=2)
    assert all(-1 <= p < i for i, p in enumerate(parents))


@SETTINGS
@given(text=st.lists(st.integers(0, 2), max_size=50), n=st.integers(1, 6))
def test_dynamic_match_first_then_extend(sam_mod: ModuleType, text: list[int], n: int) -> None:
    """The conversation SAM: each token is matched against the text before it, then added."""
    sam = sam_mod.SuffixAutomaton()
    cur = sam_mod.MatchCursor(sam)
    for i, t in enumerate(text):
        cur.feed(t)
        before, seen = text[:i], text[: i + 1]
        assert cur.match_len == longest_match(before, seen)
        assert cur.draft(n) == draft(before, seen, n)
        sam.extend(t)
    assert sam.n_tokens == len(text)
    assert [sam.token_at(i) for i in range(len(text))] == text


@SETTINGS
@given(
    text=small_text,
    query=small_query,
    cut=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 15)), max_size=3),
)
def test_dead_spans_cut_matches_back(
    sam_mod: ModuleType, text: list[int], query: list[int], cut: list[tuple[int, int]]
) -> None:
    # Disjoint spans of "removed documents".
    spans: list[tuple[int, int]] = []
    for a, w in sorted(cut):
        if (not spans or a >= spans[-1][1]) and a < len(text):
            spans.append((a, min(len(text), a + w)))

    def dead(e: int) -> bool:
        return any(a <= e - 1 < b for a, b in spans)

    sam = sam_mod.build(text, freeze=True)
    cur = feed(sam_mod, sam, query)
    cur.set_dead_spans([a for a, _ in spans], [b for _, b in spans])
    assert cur.match_len == alive_match(text, query, dead)
    assert cur.draft(5) == draft(text, query, 5, dead=dead)
    assert cur.draft_tree(8, 3, 2) == draft_tree(text, query, 8, 3, 2, dead=dead)


def test_real_text(sam_mod: ModuleType, real_tokens: list[int]) -> None:
    """Real English text: matches, counts and drafts at random points agree with brute force."""
    text = real_tokens[:6000] if sam_mod.__name__.endswith("_pure") else real_tokens[:20000]
    sam = sam_mod.build(text, freeze=True)
    rng = random.Random(7)
    for _ in range(25):
        a = rng.randrange(len(text) - 40)
        query = text[a : a + rng.randrange(1, 30)]
        if rng.random() < 0.5:
            query = [*query, rng.choice(text)]  # often a continuation never seen
        cur = feed(sam_mod, sam, query)
        ln = longest_match(text, query)
        assert cur.match_len == ln
        occ = ends(text, query[len(query) - ln :])
        assert (cur.end_pos, cur.occurrences) == (occ[0], len(occ))
        assert cur.draft(8) == draft(text, query, 8)
        assert cur.draft_tree(16, 4, 3) == draft_tree(text, query, 16, 4, 3)


def test_compiled_and_pure_build_the_same_arrays(real_tokens: list[int]) -> None:
    import samchat.sam as pkg
    from samchat.sam import automaton

    pure = pkg.load_pure()
    text = real_tokens[:5000]
    a = automaton.build(text)
    b = pure.build(text)
    assert [(n, list(v)) for n, v in a.arrays()] == [(n, list(v)) for n, v in b.arrays()]
    rng = random.Random(3)
    for _ in range(50):
        q = [rng.choice(text) for _ in range(rng.randrange(1, 6))]
        ca, cb = feed(automaton, a, q), feed(pure, b, q)
        assert (ca.match_len, ca.end_pos, ca.draft(6), ca.draft_tree(10, 3, 2)) == (
            cb.match_len,
            cb.end_pos,
            cb.draft(6),
            cb.draft_tree(10, 3, 2),
        )


def test_frozen_is_compact_and_final(sam_mod: ModuleType, real_tokens: list[int]) -> None:
    sam = sam_mod.build(real_tokens[:5000], freeze=False)
    growing = sam.nbytes()
    sam.freeze()
    assert sam.is_frozen and sam.nbytes() < growing
    assert sam.n_states <= 2 * sam.n_tokens
    with pytest.raises(ValueError, match="frozen"):
        sam.extend(1)


def test_bad_tokens(sam_mod: ModuleType) -> None:
    sam = sam_mod.SuffixAutomaton()
    with pytest.raises(ValueError, match="out of range"):
        sam.extend(-1)
    with pytest.raises(ValueError, match="out of range"):
        sam.extend(2**31)
    sam.extend(5)
    cur = sam_mod.MatchCursor(sam)
    cur.feed(5)
    cur.feed(2**40)  # unknown to any text: no match, no crash
    assert cur.match_len == 0
    cur.feed(5)
    assert cur.match_len == 1
    with pytest.raises(IndexError):
        sam.token_at(1)


def test_reset_and_copy(sam_mod: ModuleType) -> None:
    sam = sam_mod.build([1, 2, 3, 1, 2, 4])
    cur = feed(sam_mod, sam, [1, 2])
    twin = cur.copy()
    cur.reset()
    assert cur.match_len == 0 and cur.draft(3) == []
    assert twin.match_len == 2 and twin.draft(3) == [3, 1, 2]


def test_growth_from_nothing_matches_preallocated(
    sam_mod: ModuleType, real_tokens: list[int]
) -> None:
    """Tables that grow as tokens arrive end in the same automaton as presized ones."""
    text = real_tokens[:8000]
    grown = sam_mod.SuffixAutomaton()
    grown.extend_many(text)
    cur = feed(sam_mod, grown, text[100:140])
    assert cur.match_len == 40  # growing automata answer too
    assert cur.draft_tree(6, 3, 2) == draft_tree(text, text[100:140], 6, 3, 2)
    grown.freeze()
    sized = sam_mod.build(text)
    assert [(n, list(v)) for n, v in grown.arrays()] == [(n, list(v)) for n, v in sized.arrays()]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    text=st.lists(st.integers(0, 60), min_size=100, max_size=400),
    query=st.lists(st.integers(0, 60), min_size=1, max_size=3),
    topk=st.integers(1, 9),
    dead_from=st.integers(0, 400),
)
def test_tree_draft_at_high_fanout_states(
    sam_mod: ModuleType, text: list[int], query: list[int], topk: int, dead_from: int
) -> None:
    """Short matches over a wide alphabet reach states with many children (the hub table)."""
    hub_text = list(text)
    for t in range(40):  # token 7 gets 40 distinct followers with varied counts
        hub_text += [7, t] * (1 + t % 5)
    spans = [(dead_from, dead_from + 20)] if dead_from < len(hub_text) else []

    def dead(e: int) -> bool:
        return any(a <= e - 1 < b for a, b in spans)

    sam = sam_mod.build(hub_text, freeze=True)
    assert len(dict(sam.arrays())["hub_state"]) > 0
    for q in (query, [7]):
        cur = feed(sam_mod, sam, q, stop=3)
        assert cur.draft_tree(12, 3, topk) == draft_tree(hub_text, q, 12, 3, topk, stop=3)
        cur.set_dead_spans([a for a, _ in spans], [b for _, b in spans])
        assert cur.draft_tree(12, 3, topk) == draft_tree(
            hub_text, q, 12, 3, topk, stop=3, dead=dead
        )


@pytest.mark.model
def test_real_tokenizer_text(sam_mod: ModuleType) -> None:
    """Text tokenized by the default model's tokenizer, as the app indexes it."""
    from pydoc_data.topics import topics

    from samchat.models.loader import load_tokenizer

    tok, _ = load_tokenizer()
    source = " ".join(topics[k] for k in sorted(topics)[:40])
    text: list[int] = tok.encode(source, add_special_tokens=False)[:6000]
    sam = sam_mod.build(text)
    rng = random.Random(11)
    for _ in range(20):
        a = rng.randrange(len(text) - 30)
        query = [*text[a : a + rng.randrange(1, 20)], *rng.sample(text, 1)]
        cur = feed(sam_mod, sam, query)
        ln = longest_match(text, query)
        occ = ends(text, query[len(query) - ln :])
        assert (cur.match_len, cur.end_pos, cur.occurrences) == (ln, occ[0], len(occ))
        assert cur.draft(10) == draft(text, query, 10)
        assert cur.draft_tree(12, 4, 3) == draft_tree(text, query, 12, 4, 3)
