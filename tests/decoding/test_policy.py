"""The policy's numbers: draft length from acceptance rate and cost, the acceptance model's
buckets, their fade between replies and the reply-start evidence, each reply priced at its
prompt's length, and the tree sizes a cost curve allows Token Recycling."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from samchat.decoding.params import DecodingConfig
from samchat.decoding.policy import (
    MAX_DRAFT,
    PLAIN,
    REPLY_FADE,
    REPLY_START,
    AcceptanceModel,
    Drafting,
    best_sequence_length,
    bucket,
)
from samchat.decoding.policy.recycling import tree_sizes
from samchat.decoding.token_recycling import TokenRecyclingDrafter
from samchat.engines.costs import CostCurve, CostTracker

# llama.cpp's curve on a 2-core x86 CPU (docs/history): each row adds about half a forward.
STEEP = CostCurve({1: 1.0, 2: 1.77, 4: 2.65, 8: 4.35, 16: 7.96, 32: 15.04, 64: 30.02})


def test_sequence_length_follows_rate_and_cost() -> None:
    cpu = CostCurve.default("cpu")
    gpu = CostCurve.default("cuda")
    assert best_sequence_length(0.0, 32, cpu)[0] == 0  # nothing gets accepted: plain step
    assert best_sequence_length(0.1, 32, cpu)[0] == 0  # 10% does not pay 25% extra cost
    n_mid, v_mid = best_sequence_length(0.6, 32, cpu)
    n_hi, v_hi = best_sequence_length(0.95, 32, cpu)
    assert 1 <= n_mid <= n_hi <= 32 and 1.0 < v_mid < v_hi
    assert best_sequence_length(0.95, 63, gpu)[0] > n_hi  # a flat curve affords longer drafts
    assert best_sequence_length(0.95, 5, cpu)[0] <= 5


def test_acceptance_model_learns_per_bucket() -> None:
    model = AcceptanceModel()
    prior = model.rate("dyn", 6)
    for _ in range(50):
        model.update("dyn", 6, 8, 8)  # everything accepted
    assert model.rate("dyn", 6) > prior
    for _ in range(50):
        model.update("dyn", 2, 4, 0)
    assert model.rate("dyn", 2) < 0.05
    assert model.rate("static", 6) == prior  # per drafter
    assert bucket(0) == 0 and bucket(5) == bucket(7) and bucket(8) > bucket(7)


def test_acceptance_fade_moves_rates_back_toward_the_prior() -> None:
    model = AcceptanceModel()
    prior = model.rate("dyn", 20)
    for _ in range(40):
        model.update("dyn", 20, 16, 16)  # long drafts all accepted on one kind of text
    learned = model.rate("dyn", 20)
    faded = AcceptanceModel()
    for _ in range(40):
        faded.update("dyn", 20, 16, 16)
    faded.fade(REPLY_FADE)
    faded.fade(REPLY_FADE)
    assert prior < faded.rate("dyn", 20) < learned
    for m in (model, faded):  # then the same failures on new text
        for _ in range(3):
            m.update("dyn", 20, 16, 0)
    assert faded.rate("dyn", 20) < model.rate("dyn", 20)


def test_reply_start_evidence_survives_the_reply_fade() -> None:
    # A reply's first step is drafted at most once per reply: with its evidence halved each
    # reply it could never outweigh the prior, and a start match that always fails would be
    # drafted at every reply.
    model = AcceptanceModel()
    key = "dyn" + REPLY_START
    prior = model.rate(key, 6)
    for _ in range(10):
        model.fade(REPLY_FADE)
        model.update(key, 6, 1, 0)
        model.update("dyn", 6, 1, 0)
    assert model.rate(key, 6) < 0.5 * prior
    assert model.rate("dyn", 6) > model.rate(key, 6)  # the body's buckets fade as before


def test_a_session_prices_drafts_at_its_prompt_length(default_lm: Any) -> None:
    """The selector of a reply gets the curve at the prompt's length; the tracker is rebased on
    it each reply."""
    from samchat.decoding import ChatSession, DecodingConfig

    curve = CostCurve({1: 1.0, 2: 1.5, 64: 20.0}, fixed=True)
    curve.long = CostCurve({1: 1.0, 2: 3.0, 64: 60.0}, context=1024)
    session = ChatSession(default_lm, DecodingConfig(method="sam+tr"), cost_curve=curve)
    short = session._plan_drafting(200)
    assert short is not None and short.selector.curve.rel(2) == pytest.approx(1.5)
    long = session._plan_drafting(512)  # halfway from 256 to 1,024 tokens in log(context)
    assert long is not None and long.selector.curve.rel(2) == pytest.approx(2.25)
    assert long.tracker.curve is long.selector.curve


def test_a_flat_curve_allows_bigger_trees_than_a_steep_one() -> None:
    flat, torch_cpu = CostCurve.flat(), CostCurve.default("cpu")
    assert max(tree_sizes(flat)) == MAX_DRAFT
    assert max(tree_sizes(STEEP)) < 16 < max(tree_sizes(torch_cpu))
    assert set(tree_sizes(STEEP)) < set(tree_sizes(flat))
    # Where n rows cost n one-row forwards no tree can ever pay: none is allowed.
    assert tree_sizes(CostCurve({1: 1.0, 64: 64.0})) == ()
    # Every size fills the rows of a point of the curve, of the measuring ladder or the budget.
    odd = CostCurve({1: 1.0, 20: 1.1, 64: 1.2})
    assert 19 in tree_sizes(odd) and 19 not in tree_sizes(flat)


def test_tree_sizes_never_exceed_the_budget_or_the_row_ceiling() -> None:
    for curve in (CostCurve.flat(), CostCurve.default("cpu"), CostCurve.default("cuda")):
        assert max(tree_sizes(curve, 10**6)) == MAX_DRAFT
        for ceiling in (62, 32, 9, 1):  # llama.cpp's exact rows less one; capped drafts
            sizes = tree_sizes(curve, ceiling)
            assert max(sizes) == ceiling  # the whole budget is one of them
        assert tree_sizes(curve, 0) == ()


def test_token_recycling_builds_the_sizes_its_curve_allows() -> None:
    """Drafting.plan gives the drafter the sizes of its curve within the engine's exact rows;
    on a steep curve none of them pays at the prior rates, and the drafter rests."""
    vocab = 50
    logits = np.tile(np.arange(vocab, dtype=np.float32), (vocab, 1))
    for curve, exact_rows in ((CostCurve.flat(), 63), (STEEP, 64)):
        tr = TokenRecyclingDrafter(vocab, k=4)
        tr.observe(list(range(vocab)), logits)  # a warm table: every token has candidates
        tracker = CostTracker(curve)
        config = DecodingConfig(method="tr")
        drafting = Drafting.plan(
            config, tracker, AcceptanceModel(), (None, None, tr), True, exact_rows
        )
        sizes = tuple(tr.tree_sizes())
        assert sizes == tree_sizes(curve, min(drafting.selector.cap, exact_rows - 1))
        tr.begin([1, 2])
        tree = tr.propose(MAX_DRAFT)
        assert tree is not None and len(tree) <= max(sizes) <= exact_rows - 1
        if curve is STEEP:
            assert max(sizes) <= 11 and drafting.resting is tr and drafting.selector.aux is None
        else:
            assert max(sizes) == 62 and drafting.resting is None and drafting.selector.aux is tr
    # SAM-Decoding's rule drafts whatever it costs: every size, even on the steep curve.
    tr = TokenRecyclingDrafter(vocab, k=4)
    rule = DecodingConfig(method="tr", adaptive=False)
    Drafting.plan(rule, CostTracker(STEEP), AcceptanceModel(), (None, None, tr), True, 64)
    assert max(tr.tree_sizes()) == 32  # the selector's cap on a steep curve


def test_tree_sizes_follow_a_refitted_curve() -> None:
    """A curve that looked flat and is refitted steep from the steps decoding timed: the drafter
    builds the new curve's sizes (here none: every row costs a whole forward)."""
    vocab = 50
    tr = TokenRecyclingDrafter(vocab, k=4)
    tracker = CostTracker(CostCurve({1: 1.0, 64: 1.0}), every=8, min_samples=2)
    config = DecodingConfig(method="tr")
    drafting = Drafting.plan(config, tracker, AcceptanceModel(), (None, None, tr), True, 64)
    assert max(tr.tree_sizes()) == MAX_DRAFT
    for i in range(8):
        n = 1 if i % 2 else 16
        rows = np.zeros((n, vocab), dtype=np.float32)
        drafting.learn(PLAIN, list(range(n)), rows, [1], [])
        drafting.timed(PLAIN.drafter, n, 0.0, 0.001 * n)
    assert drafting.selector.curve.rel(16) == pytest.approx(16.0)
    assert tuple(tr.tree_sizes()) == ()
