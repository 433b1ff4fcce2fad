"""Token Recycling learns from the prompt: a prefill can return the logits of its last rows, on
both engines, without changing what the cache holds, and a session fills the table from them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from samchat.decoding import ChatSession, DecodingConfig, SamplingParams, StepStats
from samchat.decoding.policy import PROMPT_LOGITS, PROMPT_ROWS, REST_SAMPLE, Selector, prompt_rows
from samchat.decoding.token_recycling import TokenRecyclingDrafter
from samchat.engines import open_engine
from samchat.engines.costs import CostCurve
from tests.decoding.prompts import LONG_CONTEXT

pytestmark = pytest.mark.model


@pytest.fixture(params=["torch", "llamacpp"])
def lm(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue("default_lm" if request.param == "torch" else "gguf_lm")


def _ids(lm: Any) -> list[int]:
    ids: list[int] = lm.tokenizer(LONG_CONTEXT[0])["input_ids"]
    return ids[:300]


def test_prefill_rows_are_the_forward_logits_and_leave_the_same_cache(lm: Any) -> None:
    ids = _ids(lm)
    plain, with_rows = open_engine(lm), open_engine(lm)
    assert plain.prefill(ids[:-1]) is None
    rows = with_rows.prefill(ids[:-1], logits=16)
    assert rows is not None and rows.shape == (16, lm.vocab_size)
    # The same cache: the next token's logits agree bit for bit.
    assert np.array_equal(plain.forward([ids[-1]]), with_rows.forward([ids[-1]]))
    # The rows are the model's predictions after each of the last 16 prompt tokens.
    fresh = open_engine(lm)
    fresh.prefill(ids[:-17])
    step = fresh.forward([ids[-17]])
    assert int(step[-1].argmax()) == int(rows[0].argmax())


def test_a_session_fills_recycling_from_the_last_prompt_rows(lm: Any) -> None:
    """Where verification costs much more with more rows (the CPU curve), only the last
    PROMPT_ROWS rows; where it is flat (a GPU), every new row of the prompt."""
    messages = [{"role": "user", "content": LONG_CONTEXT[0]}]
    steep = CostCurve({1: 1.0, 2: 1.1, 4: 1.2, 8: 1.5, 16: 1.9, 64: 3.6}, fixed=True)
    for curve, everything in ((steep, False), (CostCurve.flat(), True)):
        session = ChatSession(lm, DecodingConfig(method="sam+tr"), cost_curve=curve)
        table = TokenRecyclingDrafter(lm.vocab_size)
        session.aux_drafter = table
        prompt = session.render(messages)
        assert len(prompt) > 3 * PROMPT_ROWS
        list(session.generate(messages, SamplingParams(max_new_tokens=1)))
        learned = prompt[:-1] if everything else prompt[-PROMPT_ROWS - 1 : -1]
        assert all(table.adj[t, 0] >= 0 for t in learned)
        rows = session.prompt_rows
        assert rows is not None and rows[0] == learned, curve
        if not everything:
            early = [t for t in prompt[: -3 * PROMPT_ROWS] if t not in set(learned)]
            assert early and all(table.adj[t, 0] == -1 for t in early[:20])  # the last rows
    # A plain session asks for no logits at prefill.
    plain = ChatSession(lm, DecodingConfig(method="plain"))
    list(plain.generate(messages, SamplingParams(max_new_tokens=1)))
    assert plain.prompt_rows is None


def test_the_rows_follow_the_cost_and_fit_in_memory() -> None:
    assert prompt_rows(3.6, 49152) == PROMPT_ROWS  # this CPU's curve
    assert prompt_rows(1.0, 49152) == PROMPT_LOGITS // 49152 > 2000  # a flat curve
    assert prompt_rows(1.0, 10**9) == PROMPT_ROWS  # a huge vocabulary: never fewer


def test_recycling_rests_where_none_of_its_trees_can_pay(lm: Any) -> None:
    """Where 2 rows cost 1.7x one (llama.cpp's Q4_1 file on two cores), no Token Recycling tree
    pays: the session asks for no prompt rows, never drafts with it, and lets it read only one
    forward in REST_SAMPLE, so its bookkeeping leaves the steps that draft nothing."""
    steep = CostCurve({1: 1.0, 2: 1.7, 4: 2.6, 8: 4.3, 16: 7.4, 64: 25.0}, fixed=True)
    session = ChatSession(lm, DecodingConfig(method="sam+tr"), cost_curve=steep)
    table = TokenRecyclingDrafter(lm.vocab_size)
    reads: list[int] = []
    observe = table.observe

    def counted(ids: Any, logits: Any) -> None:
        reads.append(len(ids))
        observe(ids, logits)

    table.observe = counted  # type: ignore[method-assign]
    session.aux_drafter = table
    messages = [{"role": "user", "content": LONG_CONTEXT[0]}]
    params = SamplingParams(max_new_tokens=3 * REST_SAMPLE + 2)
    events = list(session.generate(messages, params))
    steps = [e for e in events if isinstance(e, StepStats)]
    assert session.prompt_rows is None
    assert steps and not any("tr" in e.drafter for e in steps)
    assert len(reads) == len(steps) // REST_SAMPLE >= 2
    assert (table.adj[:, 0] >= 0).sum() >= 1  # what it read, it learned

    # The same drafter, the same rates, on a flat curve: its trees pay, so it works every step.
    flat = Selector(DecodingConfig(), CostCurve.flat(), session._planner.acceptance, aux=table)
    assert flat.tree_can_pay(table)
    assert not Selector(
        DecodingConfig(), steep, session._planner.acceptance, aux=table
    ).tree_can_pay(table)
    # SAM-Decoding's rule (not adaptive) drafts with Token Recycling whatever the curve says.
    rule = DecodingConfig(adaptive=False)
    assert Selector(rule, steep, session._planner.acceptance, aux=table).tree_can_pay(table)
