"""Tree verification on a tiny random Llama: one forward over a draft tree gives every node the
logits of its own path, the walk accepts exactly the model's greedy path, and the KV cache is
compacted to the accepted path."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samchat.decoding.params import SamplingParams
from samchat.decoding.sampling import Sampler
from samchat.decoding.session import ChatSession
from samchat.decoding.tree import DraftTree
from samchat.engines.costs import CostCurve
from tests.tiny import TINY_VOCAB, full_logits, make_tiny_llama, tiny_lm

pytestmark = pytest.mark.usefixtures("one_thread")

_MODELS: dict[str, Any] = {}


def _model(attn: str) -> Any:
    if attn not in _MODELS:
        _MODELS[attn] = make_tiny_llama(attn)
    return _MODELS[attn]


def _path_tokens(tree_tokens: list[int], parents: list[int], node: int) -> list[int]:
    out: list[int] = []
    while node != -1:
        out.append(tree_tokens[node])
        node = parents[node]
    return out[::-1]


@st.composite
def prompt_and_tree(draw: st.DrawFn) -> tuple[list[int], list[tuple[int, bool, int]]]:
    prompt = draw(st.lists(st.integers(0, TINY_VOCAB - 1), min_size=1, max_size=24))
    n = draw(st.integers(1, 14))
    nodes = []
    for i in range(n):
        parent = draw(st.integers(-1, i - 1))
        # "greedy" nodes take the model's own choice after their path, so that long paths
        # get accepted; the others are random tokens (mostly rejected).
        greedy = draw(st.booleans())
        nodes.append((parent, greedy, draw(st.integers(0, TINY_VOCAB - 1))))
    return prompt, nodes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=prompt_and_tree(),
    attn=st.sampled_from(["sdpa", "eager"]),
    reuse=st.booleans(),
)
def test_tree_verification_matches_per_path_recompute(
    case: tuple[list[int], list[tuple[int, bool, int]]], attn: str, reuse: bool
) -> None:
    model = _model(attn)
    prompt, spec = case
    tokens: list[int] = []
    parents: list[int] = []
    for parent, greedy, rand_tok in spec:
        if greedy:
            ctx = prompt + _path_tokens(tokens, parents, parent)
            tok = int(full_logits(model, ctx)[-1].argmax())
        else:
            tok = rand_tok
        tokens.append(tok)
        parents.append(parent)
    tree = DraftTree(tokens, parents, "test")

    session = ChatSession(tiny_lm(model), cost_curve=CostCurve({1: 1.0, 64: 1.0}))
    if reuse:  # a cache left over from a longer, different text must not leak in
        session.prefill_tokens([*prompt[:-1], 5, 6, 7, 8, 9])
    session.prefill_tokens(prompt)
    assert session.cached_tokens == len(prompt) - 1
    sampler = Sampler(SamplingParams(temperature=0.0))
    ids, path, bonus, host_logits = session.verify_step(prompt[-1], tree, sampler)
    logits = torch.from_numpy(host_logits)

    # Every input position has the logits of its own path, computed from scratch.
    ref_root = full_logits(model, prompt)[-1]
    torch.testing.assert_close(logits[0], ref_root, atol=1e-4, rtol=1e-4)
    for i in range(len(tokens)):
        ref = full_logits(model, prompt + _path_tokens(tokens, parents, i))[-1]
        torch.testing.assert_close(logits[i + 1], ref, atol=1e-4, rtol=1e-4)

    # The accepted path is the longest path of greedy agreements, computed independently.
    expect: list[int] = []
    ctx = list(prompt)
    node = -1
    while True:
        choice = int(full_logits(model, ctx)[-1].argmax())
        child = next(
            (i for i in range(len(tokens)) if parents[i] == node and tokens[i] == choice), None
        )
        if child is None:
            break
        expect.append(child + 1)
        ctx.append(choice)
        node = child
    assert path == expect
    assert bonus == choice
    assert ids[0] == prompt[-1]

    # The cache now holds exactly prompt + accepted path, with the rows a plain forward gives.
    committed = prompt + [tokens[j - 1] for j in path]
    assert session.cached_tokens == len(committed)
    ref_cache = model(input_ids=torch.tensor([committed]), use_cache=True).past_key_values
    for mine, ref in zip(session.engine._kv.cache.layers, ref_cache.layers, strict=True):
        assert mine.keys.shape == ref.keys.shape
        torch.testing.assert_close(mine.keys, ref.keys, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(mine.values, ref.values, atol=1e-4, rtol=1e-4)

    # And decoding continues from it as from a fresh prefill.
    _, _, nxt, after = session.verify_step(bonus, None, sampler)
    torch.testing.assert_close(
        torch.from_numpy(after[0]),
        full_logits(model, [*committed, bonus])[-1],
        atol=1e-4,
        rtol=1e-4,
    )
    assert nxt == int(after[0].argmax())


def test_tree_with_duplicate_siblings_and_deep_chain() -> None:
    model = _model("sdpa")
    prompt = [3, 1, 4, 1, 5]
    ctx = list(prompt)
    chain = []
    for _ in range(6):
        t = int(full_logits(model, ctx)[-1].argmax())
        chain.append(t)
        ctx.append(t)
    # Two identical first children: the first one wins, the accepted path is the whole chain.
    tokens = [chain[0], chain[0], *chain[1:]]
    parents = [-1, -1, 0, 2, 3, 4, 5]
    session = ChatSession(tiny_lm(model), cost_curve=CostCurve({1: 1.0, 64: 1.0}))
    session.prefill_tokens(prompt)
    sampler = Sampler(SamplingParams())
    _, path, bonus, _ = session.verify_step(prompt[-1], DraftTree(tokens, parents, "t"), sampler)
    assert path == [1, 3, 4, 5, 6, 7]
    assert bonus == int(full_logits(model, ctx)[-1].argmax())
    assert session.cached_tokens == len(prompt) + len(chain)


def test_bad_tree_is_rejected() -> None:
    tree = DraftTree([1, 2], [-1, 1], "t")
    try:
        tree.layout()
    except ValueError as exc:
        assert "parent" in str(exc)
    else:
        raise AssertionError("a node whose parent comes after it must be rejected")


def test_first_path_of_a_tree_is_a_sequence() -> None:
    tree = DraftTree([10, 11, 12, 13, 14], [-1, -1, 0, 0, 2], "static")
    seq = tree.first_path()
    assert seq.tokens == [10, 12, 14]
    assert seq.is_sequence
    assert not tree.is_sequence
    assert DraftTree.sequence([1, 2, 3], "dyn").is_sequence
