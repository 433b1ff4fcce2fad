"""The policy's numbers: draft length from acceptance rate and cost, the acceptance model's
buckets, their fade between replies and the reply-start evidence, and each reply priced at its
prompt's length."""

from __future__ import annotations

from typing import Any

import pytest

from samchat.decoding.policy import (
    REPLY_FADE,
    REPLY_START,
    AcceptanceModel,
    best_sequence_length,
    bucket,
)
from samchat.engines.cost import CostCurve


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
