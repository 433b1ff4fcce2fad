"""Token Recycling: the table learns from every verified position, drafts follow the template,
and the table survives a restart (and a damaged file does not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from samchat.decoding import token_recycling
from samchat.decoding.token_recycling import (
    TokenRecyclingDrafter,
    build_template,
    expected_accepted,
)
from samchat.decoding.tree import DraftTree


def test_template_is_prefix_closed_and_best_first() -> None:
    rates = [0.5, 0.2, 0.1, 0.05]
    for size in (1, 4, 16, 60):
        tmpl = build_template(rates, size)
        assert len(tmpl) == size
        seen = set()
        for path in tmpl:
            assert len(path) == 1 or path[:-1] in seen  # parents come first
            seen.add(path)
    assert build_template(rates, 3) == [(0,), (1,), (0, 0)]
    small, big = build_template(rates, 8), build_template(rates, 32)
    assert expected_accepted(small, rates) < expected_accepted(big, rates)
    assert expected_accepted([(0,), (0, 0)], rates) == pytest.approx(0.5 + 0.25)


def test_observe_updates_every_position_and_drafts_from_the_table(tmp_path: Path) -> None:
    vocab = 50
    d = TokenRecyclingDrafter(vocab, k=4, path=tmp_path / "tr.npy")
    d.begin([1, 2, 3])
    assert d.propose(8) is None  # cold table: nothing to draft
    assert d.expected_accepted(8) == 0.0
    logits = np.zeros((3, vocab), dtype=np.float32)
    for row, best in enumerate(([10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33])):
        for rank, tok in enumerate(best):
            logits[row, tok] = 10.0 - rank
    d.observe([3, 10, 20], logits)  # position 1 and 2 were rejected draft nodes: still learnt
    assert d.adj[3].tolist() == [10, 11, 12, 13]
    assert d.adj[10].tolist() == [20, 21, 22, 23]
    assert d.adj[20].tolist() == [30, 31, 32, 33]
    d.advance([7, 3])
    tree = d.propose(7)
    assert tree is not None and tree.source == "tr"
    assert tree.tokens[0] == 10 and tree.parents[0] == -1  # rank 0 after the last token
    for tok, par in zip(tree.tokens, tree.parents, strict=True):
        parent_tok = 3 if par == -1 else tree.tokens[par]
        assert tok in d.adj[parent_tok].tolist()
    assert 10 in tree.tokens and 20 in tree.tokens and 30 in tree.tokens  # depth 3 path
    assert d.expected_accepted(8) > 0.0


def test_rank_statistics_follow_what_the_model_picks() -> None:
    vocab = 20
    d = TokenRecyclingDrafter(vocab, k=2)
    before = d.rank_rates[1]
    logits = np.zeros((1, vocab), dtype=np.float32)
    logits[0, 5], logits[0, 6] = 2.0, 1.0
    d.observe([1], logits)  # learn: after 1 come 5, 6
    flipped = np.zeros((1, vocab), dtype=np.float32)
    flipped[0, 6], flipped[0, 5] = 2.0, 1.0
    for _ in range(400):
        d.observe([1], flipped)  # the model now picks the old rank-1 candidate...
        d.observe([1], logits)  # ...and then the old rank-1 again
    assert d.rank_rates[1] > before


def test_table_persists_and_bad_files_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "tr.npy"
    d = TokenRecyclingDrafter(30, k=3, path=path)
    logits = np.tile(np.arange(30, dtype=np.float32), (2, 1))
    d.observe([4, 5], logits)
    d.finish()
    saved = np.load(path)
    assert saved.dtype == np.int32 and saved.shape == (30, 3)
    again = TokenRecyclingDrafter(30, k=3, path=path)
    assert again.adj[4].tolist() == [29, 28, 27]
    assert again.adj[0].tolist() == [-1, -1, -1]
    again.begin([4])  # a loaded row counts as known to the selector...
    assert again.expected_accepted(8) > 0.0
    tree = again.propose(8)
    assert tree is not None and tree.tokens[0] == 29
    again.begin([0])  # ...an empty one does not
    assert again.expected_accepted(8) == 0.0
    other_shape = TokenRecyclingDrafter(31, k=3, path=path)  # another model: fresh table
    assert (other_shape.adj == -1).all()
    np.save(path, np.full((30, 3), 999, dtype=np.int32))  # ids beyond the vocabulary
    assert (TokenRecyclingDrafter(30, k=3, path=path).adj == -1).all()
    path.write_bytes(b"not a numpy file")
    assert (TokenRecyclingDrafter(30, k=3, path=path).adj == -1).all()


def test_realised_acceptance_corrects_the_prediction() -> None:
    vocab = 40
    d = TokenRecyclingDrafter(vocab, k=4)
    logits = np.tile(np.arange(vocab, dtype=np.float32), (vocab, 1))
    d.observe(list(range(vocab)), logits)  # every token has candidates
    d.begin([1, 2])
    before = d.expected_accepted(16)
    assert before > 0
    for _ in range(100):
        assert d.propose(16) is not None
        d.feedback(0)  # the model never accepts these trees
    assert d.expected_accepted(16) < before / 5


def _old_propose(adj: np.ndarray, last: int, template: list[tuple[int, ...]]) -> DraftTree | None:
    """The node-by-node walk propose() replaced: the reference its gathers must reproduce."""
    tokens: list[int] = []
    parents: list[int] = []
    node_of: dict[tuple[int, ...], int] = {}
    for path in template:
        if len(path) == 1:
            parent, ptok = -1, last
        else:
            pnode = node_of.get(path[:-1])
            if pnode is None:
                continue
            parent, ptok = pnode, tokens[pnode]
        tok = int(adj[ptok, path[-1]])
        if tok < 0:
            continue
        node_of[path] = len(tokens)
        tokens.append(tok)
        parents.append(parent)
    return DraftTree(tokens, parents, "tr") if tokens else None


def test_propose_gathers_the_tree_the_node_walk_would() -> None:
    """Random tables with holes (whole rows and single candidates missing), random rank
    rates, every template size: the level-by-level gathers give the very same tree."""
    rng = np.random.default_rng(7)
    vocab, k = 40, 4
    holes = 0
    for trial in range(60):
        d = TokenRecyclingDrafter(vocab, k=k)
        table = rng.integers(0, vocab, size=(vocab, k), dtype=np.int32)
        table[rng.random((vocab, k)) < rng.uniform(0.0, 0.4)] = -1
        table[rng.random(vocab) < 0.2] = -1
        d.adj[:] = table
        d._known = table[:, 0] >= 0  # as observe() keeps it
        # Rank rates from counts: the shapes of the templates vary with them.
        d.hits = rng.integers(0, 500, size=k)
        d.seen = int(d.hits.sum()) + int(rng.integers(0, 500))
        d._refresh()
        rates = d.rank_rates
        for last in rng.choice(vocab, size=3, replace=False).tolist():
            d.begin([int(last)])
            for size in d.tree_sizes():
                got = d.propose(size)
                want = _old_propose(table, int(last), build_template(rates, size))
                if table[last, 0] < 0:  # no row: the fallback's, empty (nothing emitted)
                    want = None
                assert (got is None) == (want is None), (trial, last, size)
                if got is not None and want is not None:
                    assert (got.tokens, got.parents) == (want.tokens, want.parents)
                    assert got.source == "tr"
                    holes += len(got) < size
    assert holes > 50  # the trees dropped nodes (and subtrees) often
    assert all(isinstance(p, token_recycling._Plan) for p in d._plans.values())


def _old_observe(
    adj: np.ndarray, hits: np.ndarray, seen: float, ids: list[int], top: np.ndarray
) -> float:
    """The numpy observe() replaced (hits and adj updated in place; returns seen)."""
    idx = np.asarray(ids, dtype=np.int64)
    old = adj[idx]
    known = old[:, 0] >= 0
    if known.any():
        hits += (old[known] == top[known, :1]).sum(axis=0)
        seen += float(known.sum())
    adj[idx] = top  # numpy: a repeated id keeps its last row
    return seen


def test_observe_learns_as_the_numpy_table_did_repeated_ids_included() -> None:
    """Steps with repeated ids (a draft tree repeats tokens): the last row of an id wins, and
    each row is scored against the table as it was before the step, as numpy did."""
    rng = np.random.default_rng(3)
    vocab, k = 30, 4
    d = TokenRecyclingDrafter(vocab, k=k)
    adj = np.full((vocab, k), -1, dtype=np.int32)
    hits = np.zeros(k)
    seen = 0.0
    repeats = 0
    for _ in range(100):  # refreshes the templates (every 32 steps) along the way
        n = int(rng.integers(1, 12))
        ids = rng.integers(0, 8, size=n).tolist()  # few distinct ids: many repeats
        logits = rng.standard_normal((n, vocab)).astype(np.float32)
        top = torch.topk(torch.from_numpy(logits), k, dim=-1).indices.to(torch.int32).numpy()
        seen = _old_observe(adj, hits, seen, ids, top)
        d.observe(ids, logits)
        repeats += len(set(ids)) < n
        assert np.array_equal(d.adj, adj)
    assert repeats > 50
    assert seen > 0 and hits.sum() > 0
    prior = [p * 200.0 for p in token_recycling.RANK_PRIOR[:k]]
    want = [float((p + h) / (200.0 + seen)) for p, h in zip(prior, hits, strict=True)]
    assert d.rank_rates == want
    assert d.hits.tolist() == hits.tolist() and int(d.seen) == seen
    assert d._known.tolist() == (adj[:, 0] >= 0).tolist()


def test_observe_writes_the_table_propose_gathers_from() -> None:
    """The flat view propose() gathers from is the table's own memory."""
    d = TokenRecyclingDrafter(20, k=2)
    logits = np.zeros((1, 20), dtype=np.float32)
    logits[0, 9], logits[0, 4] = 2.0, 1.0
    d.observe([3], logits)
    assert d.adj.dtype == np.int32 and d.adj.shape == (20, 2)
    assert d.adj[3].tolist() == [9, 4]
    assert d._flat[3 * 2 : 3 * 2 + 2].tolist() == [9, 4]


def test_top_k_rows_equals_a_full_sort() -> None:
    """The group-wise top k (rows, vocab sizes with and without a ragged tail, vocabularies
    smaller than k groups, the best all in one group) gives torch.topk's ids, best first."""
    rng = np.random.default_rng(11)
    for vocab in (8, 50, 1000, 1024, 1030, 32000, 49152, 151936):
        for k in (1, 4, 8):
            rows = int(rng.integers(1, 20))
            logits = rng.standard_normal((rows, vocab)).astype(np.float32)
            # The best of some rows sits in the tail, or all in one block.
            logits[0, -3:] += 10.0
            if rows > 1:
                logits[1, 200 % vocab : 200 % vocab + k] += 10.0
            if rows > 2:  # ids g, g + G, g + 2G...: the best all in one group
                stride = max(1, vocab // token_recycling._GROUP)
                logits[2, 5 : 5 + k * stride : stride] += 10.0
            want = torch.topk(torch.from_numpy(logits), k, dim=-1).indices.numpy()
            assert np.array_equal(token_recycling.top_k_rows(logits, k), want), (vocab, k)


def test_a_token_without_a_row_drafts_from_the_most_emitted_tokens() -> None:
    vocab = 40
    d = TokenRecyclingDrafter(vocab, k=4)
    logits = np.zeros((2, vocab), dtype=np.float32)
    logits[0, 9], logits[1, 8] = 1.0, 1.0
    d.observe([5, 6], logits)  # rows: after 5 comes 9, after 6 comes 8
    d.begin([1])
    assert d.expected_accepted(8) == 0.0  # nothing emitted yet: no fallback
    assert d.propose(8) is None
    d.advance([5, 6, 5, 7, 6, 5, 30])  # 30 has no row; 5 was emitted most, then 6, then 7
    assert d.expected_accepted(8) > 0.0
    tree = d.propose(63)
    assert tree is not None
    # The prediction the drafter checks itself against is what it told the selector.
    assert d._pending_prediction * d.calibration == pytest.approx(d.expected_accepted(63))
    assert d.expected_accepted(63) < d.potential(63)  # the fallback's own, lower rates
    roots = [t for t, p in zip(tree.tokens, tree.parents, strict=True) if p == -1]
    assert roots[:3] == [5, 6, 7]
    pairs = {(tree.tokens[p], t) for t, p in zip(tree.tokens, tree.parents, strict=True) if p >= 0}
    assert (5, 9) in pairs and (6, 8) in pairs  # deeper levels follow the table...
    assert all(t in d.adj[parent].tolist() for parent, t in pairs)
    assert {parent for parent, _ in pairs} <= {5, 6, 9, 8}  # ...and 7, 30 have no row
    # The fallback's own rates: the model went on with 6, the fallback's rank 1.
    before = d.fallback_rates
    d.advance([6, 31])
    assert d.fallback_seen == 1
    assert d.fallback_rates[1] > before[1] and d.fallback_rates[0] < before[0]
    d.advance([5])  # 31 had no row, and the model went on with 5: rank 0
    assert d.fallback_hits[:2] == [1, 1]
    d.advance([5])  # 5 has a row: not counted
    assert d.fallback_seen == 2
    assert d.propose(63) is not None
    assert d._pending_prediction * d.calibration == pytest.approx(d.expected_accepted(63))
    assert d.expected_accepted(63) == pytest.approx(d.potential(63))  # the table's rates


def test_the_fallback_row_is_the_most_emitted_tokens_however_they_come() -> None:
    """Kept step by step, the row equals a count from scratch (ties: lower id first)."""
    rng = np.random.default_rng(3)
    for trial in range(20):
        vocab, k = 30, 4
        d = TokenRecyclingDrafter(vocab, k=k)
        counts = np.zeros(vocab, dtype=np.int64)
        for _ in range(60):
            step = (rng.zipf(1.5, size=int(rng.integers(1, 5))) % vocab).tolist()
            d.advance(step)
            np.add.at(counts, step, 1)
            want = sorted(np.flatnonzero(counts), key=lambda t: (-counts[t], t))[:k]
            assert d._top == want, trial
            # No token has a row here: the tree is the fallback's first level alone.
            tree = d.propose(63)
            assert tree is not None and tree.tokens == want, trial
