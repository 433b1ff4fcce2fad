"""Token Recycling: the table learns from every verified position, drafts follow the template,
and the table survives a restart (and a damaged file does not)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from samchat.decoding.recycling import (
    SIZES,
    TokenRecyclingDrafter,
    build_template,
    expected_accepted,
)


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
    logits = torch.zeros(3, vocab)
    for row, best in enumerate(([10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33])):
        for rank, tok in enumerate(best):
            logits[row, tok] = 10.0 - rank
    d.observe([3, 10, 20], logits)  # position 1 and 2 were rejected draft nodes: still learnt
    assert d.adj[3].tolist() == [10, 11, 12, 13]
    assert d.adj[10].tolist() == [20, 21, 22, 23]
    assert d.adj[20].tolist() == [30, 31, 32, 33]
    d.advance([7, 3])
    tree = d.propose(SIZES[2])
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
    logits = torch.zeros(1, vocab)
    logits[0, 5], logits[0, 6] = 2.0, 1.0
    d.observe([1], logits)  # learn: after 1 come 5, 6
    flipped = torch.zeros(1, vocab)
    flipped[0, 6], flipped[0, 5] = 2.0, 1.0
    for _ in range(400):
        d.observe([1], flipped)  # the model now picks the old rank-1 candidate...
        d.observe([1], logits)  # ...and then the old rank-1 again
    assert d.rank_rates[1] > before


def test_table_persists_and_bad_files_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "tr.npy"
    d = TokenRecyclingDrafter(30, k=3, path=path)
    logits = torch.arange(30, dtype=torch.float32).repeat(2, 1)
    d.observe([4, 5], logits)
    d.finish()
    again = TokenRecyclingDrafter(30, k=3, path=path)
    assert again.adj[4].tolist() == [29, 28, 27]
    assert again.adj[0].tolist() == [-1, -1, -1]
    other_shape = TokenRecyclingDrafter(31, k=3, path=path)  # another model: fresh table
    assert (other_shape.adj == -1).all()
    np.save(path, np.full((30, 3), 999, dtype=np.int32))  # ids beyond the vocabulary
    assert (TokenRecyclingDrafter(30, k=3, path=path).adj == -1).all()
    path.write_bytes(b"not a numpy file")
    assert (TokenRecyclingDrafter(30, k=3, path=path).adj == -1).all()


def test_realised_acceptance_corrects_the_prediction() -> None:
    vocab = 40
    d = TokenRecyclingDrafter(vocab, k=4)
    logits = torch.arange(vocab, dtype=torch.float32).repeat(vocab, 1)
    d.observe(list(range(vocab)), logits)  # every token has candidates
    d.begin([1, 2])
    before = d.expected_accepted(16)
    assert before > 0
    for _ in range(100):
        assert d.propose(16) is not None
        d.feedback(0)  # the model never accepts these trees
    assert d.expected_accepted(16) < before / 5
