"""Speculative sampling over a draft tree commits tokens with exactly the plain sampling
distribution: many draws on a tiny model against the exact two-token distribution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samchat.decoding.params import SamplingParams
from samchat.decoding.sampling import Sampler, processed_probs
from samchat.decoding.session import ChatSession
from samchat.decoding.tree import DraftTree
from samchat.engines.costs import CostCurve
from tests.tiny import full_logits, tiny_lm

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = [7, 3, 9, 12, 5, 33]


def _probs(model: object, ids: list[int], params: SamplingParams) -> np.ndarray:
    return processed_probs(full_logits(model, ids)[-1].detach().numpy(), params)


def _exact_pairs(model: object, params: SamplingParams) -> dict[tuple[int, int], float]:
    p0 = _probs(model, PROMPT, params)
    out: dict[tuple[int, int], float] = {}
    for t1 in np.flatnonzero(p0).tolist():
        p1 = _probs(model, [*PROMPT, t1], params)
        for t2 in np.flatnonzero(p1).tolist():
            out[(t1, t2)] = float(p0[t1] * p1[t2])
    return out


def _draw_pairs(
    session: ChatSession, tree: DraftTree, sampler: Sampler, n: int
) -> dict[tuple[int, int], int]:
    counts: dict[tuple[int, int], int] = {}
    for _ in range(n):
        session.prefill_tokens(PROMPT)  # crops back to PROMPT[:-1]: no forward needed
        ids, path, bonus, _ = session.verify_step(PROMPT[-1], tree, sampler)
        committed = [ids[j] for j in path] + [bonus]
        if len(committed) < 2:
            _, _, nxt, _ = session.verify_step(bonus, None, sampler)
            committed.append(nxt)
        key = (committed[0], committed[1])
        counts[key] = counts.get(key, 0) + 1
    return counts


def _chi_square_p(counts: dict[tuple[int, int], int], exact: dict[tuple[int, int], float]) -> float:
    n = sum(counts.values())
    assert set(counts) <= set(exact), "a pair plain sampling can never produce was committed"
    stat = sum((counts.get(k, 0) - n * p) ** 2 / (n * p) for k, p in exact.items())
    dof = len(exact) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(stat / 2.0)))


def test_tree_speculative_sampling_matches_plain_distribution(tiny_model: object) -> None:
    params = SamplingParams(temperature=1.0, top_k=4, seed=1234)
    exact = _exact_pairs(tiny_model, params)
    p0 = _probs(tiny_model, PROMPT, params)
    top = np.argsort(-p0, kind="stable").tolist()
    # Root children: the two likeliest tokens and one the model never picks (top-k cut);
    # under the likeliest, its own likeliest continuation and a second sibling.
    t_a, t_b, never = top[0], top[1], top[-1]
    p_a = _probs(tiny_model, [*PROMPT, t_a], params)
    a_top = np.argsort(-p_a, kind="stable").tolist()
    tree = DraftTree([t_a, t_b, never, a_top[0], a_top[1]], [-1, -1, -1, 0, 0], "test")

    session = ChatSession(tiny_lm(tiny_model), cost_curve=CostCurve({1: 1.0, 64: 1.0}))
    sampler = Sampler(params)
    counts = _draw_pairs(session, tree, sampler, 2000)
    assert _chi_square_p(counts, exact) > 1e-3
    # The draft was really used: most draws accepted at least the first level.
    assert sum(c for (t1, _), c in counts.items() if t1 in (t_a, t_b)) > 1000


def test_chi_square_check_detects_a_wrong_distribution(tiny_model: object) -> None:
    """The same check rejects draws from another temperature: the test can fail."""
    params = SamplingParams(temperature=1.0, top_k=4, seed=99)
    exact = _exact_pairs(tiny_model, params)
    session = ChatSession(tiny_lm(tiny_model), cost_curve=CostCurve({1: 1.0, 64: 1.0}))
    wrong = Sampler(SamplingParams(temperature=0.5, top_k=4, seed=99))
    counts = _draw_pairs(session, DraftTree([1], [-1], "t"), wrong, 2000)
    assert _chi_square_p(counts, exact) < 1e-3


def test_top_p_and_top_k_cut_the_distribution() -> None:
    logits = np.array([4.0, 3.0, 2.0, 1.0, 0.0], dtype=np.float32)
    full = np.exp(logits) / np.exp(logits).sum()
    p = processed_probs(logits, SamplingParams(temperature=1.0, top_k=2))
    assert np.count_nonzero(p) == 2
    np.testing.assert_allclose(p[:2], full[:2] / full[:2].sum(), rtol=1e-6)
    # top_p: keep the smallest prefix whose mass reaches top_p
    q = processed_probs(logits, SamplingParams(temperature=1.0, top_p=float(full[0]) + 1e-3))
    assert np.count_nonzero(q) == 2
    r = processed_probs(logits, SamplingParams(temperature=1.0, top_p=0.01))
    assert np.count_nonzero(r) == 1 and float(r[0]) == 1.0


def test_same_seed_same_tokens_with_and_without_drafts(tiny_model: object) -> None:
    """One random draw per committed token: a seeded speculative run commits exactly the
    tokens a seeded plain run commits."""
    params = SamplingParams(temperature=0.8, top_p=0.9, seed=7)
    session = ChatSession(tiny_lm(tiny_model), cost_curve=CostCurve({1: 1.0, 64: 1.0}))

    def run(with_drafts: bool) -> list[int]:
        sampler = Sampler(params)
        session.prefill_tokens(PROMPT)
        pending = PROMPT[-1]
        out: list[int] = []
        while len(out) < 30:
            tree = None
            if with_drafts:  # draft the previous run's greedy guesses: some accepted
                logits = full_logits(tiny_model, [*PROMPT, *out])[-1]
                a, b = torch.topk(logits, 2).indices.tolist()
                nxt = int(full_logits(tiny_model, [*PROMPT, *out, a])[-1].argmax())
                tree = DraftTree([a, b, nxt], [-1, -1, 0], "t")
            ids, path, bonus, _ = session.verify_step(pending, tree, sampler)
            out.extend(ids[j] for j in path)
            out.append(bonus)
            pending = bonus
        return out[:30]

    assert run(True) == run(False)
