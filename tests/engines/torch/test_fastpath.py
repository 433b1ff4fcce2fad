"""The CPU fast path for multi-token verification forwards: same results as the model's own
kernels up to float rounding, and untouched single-token (plain) forwards."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch

from samchat.decoding.tree import DraftTree
from samchat.engines.kernels import DEFAULT_PLAN, KernelPlan
from samchat.engines.torch import fastpath
from samchat.engines.torch.engine import tree_mask, tree_positions
from samchat.engines.torch.forward import ModelForward
from samchat.engines.torch.kvcache import KVCache, cache_kwarg
from tests.tiny import make_tiny_llama


def _stock_logits(model: Any, ids: torch.Tensor, cache: Any, mask: Any, pos: Any) -> torch.Tensor:
    kwargs: dict[str, Any] = {"use_cache": True, cache_kwarg(model): cache}
    if mask is not None:
        kwargs["attention_mask"] = mask
        kwargs["position_ids"] = pos
    logits: torch.Tensor = model(input_ids=ids, **kwargs).logits[0]
    return logits


class _Spy:
    """Counts what the fast path is for: no packed-GEMM linears, grouped attention calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.linear_rows: list[int] = []
        self.attn_queries: list[tuple[int, ...]] = []
        linear = torch.nn.functional.linear
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def spy_linear(x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            self.linear_rows.append(int(x.shape[-2]) if x.dim() > 1 else 1)
            return linear(x, *args, **kwargs)

        def spy_sdpa(q: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            self.attn_queries.append(tuple(q.shape))
            return sdpa(q, *args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "linear", spy_linear)
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy_sdpa)


def _compare(
    model: Any,
    prefix: list[int],
    tree: DraftTree,
    atol: float,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> None:
    forward = ModelForward(model)
    assert forward.patched
    n = len(prefix)
    kv = KVCache(model)
    with torch.inference_mode():
        forward(torch.tensor([prefix]), kv.cache, last_only=True)
        ids = torch.tensor([[prefix[-1], *tree.tokens]])
        mask = pos = None
        if not tree.is_sequence:
            lay = tree.layout()
            mask = tree_mask(lay, n, torch.float32, torch.device("cpu"))
            pos = tree_positions(lay, n, torch.device("cpu"))
        spy = _Spy(monkeypatch) if monkeypatch is not None else None
        fast = forward(ids, kv.cache, mask, pos)
        if spy is not None and monkeypatch is not None:
            rows = ids.shape[1]
            cfg = model.config
            groups = cfg.num_attention_heads // cfg.num_key_value_heads
            assert spy.linear_rows == []  # every linear ran as W @ x^T
            assert len(spy.attn_queries) == cfg.num_hidden_layers
            grouped = (1, cfg.num_key_value_heads, groups * rows)
            expect = grouped if groups > 1 else (1, cfg.num_attention_heads, rows)
            assert all(q[:3] == expect for q in spy.attn_queries)
            monkeypatch.undo()
        kv.crop(n)
        assert not fastpath.active()
        stock = _stock_logits(model, ids, kv.cache, mask, pos)
    assert fast.shape == stock.shape
    assert torch.allclose(fast, stock, atol=atol, rtol=0)
    assert torch.equal(fast.argmax(-1), stock.argmax(-1))


@pytest.mark.parametrize("kind", ["sequence", "tree"])
def test_fast_verification_matches_stock_kernels_on_a_gqa_model(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = make_tiny_llama()
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    if kind == "sequence":
        tree = DraftTree.sequence([5, 6, 7, 8, 9, 10, 11], "t")
    else:  # two branches under the root and a grandchild
        tree = DraftTree([5, 6, 7, 8, 9], [-1, -1, 0, 0, 2], "t")
    _compare(model, list(range(3, 40)), tree, atol=1e-4, monkeypatch=monkeypatch)
    assert model.config._attn_implementation == fastpath.ATTN_NAME


def test_fast_verification_without_grouped_heads(monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_tiny_llama(seed=1, kv_heads=4)
    tree = DraftTree([5, 6, 7, 8], [-1, 0, -1, 2], "t")
    _compare(model, list(range(3, 30)), tree, atol=1e-4, monkeypatch=monkeypatch)


def test_plain_single_token_forwards_keep_the_models_own_kernels_by_default() -> None:
    model = make_tiny_llama()
    forward = ModelForward(model)
    assert forward.plan == DEFAULT_PLAN and forward.plan.kernel(1) == "stock"
    kv = KVCache(model)
    ids = torch.tensor([[7]])
    with torch.inference_mode():
        forward(torch.tensor([list(range(3, 20))]), kv.cache, last_only=True)
        inside = forward(ids, kv.cache)
        kv.crop(17)
        outside = _stock_logits(model, ids, kv.cache, None, None)
    assert torch.equal(inside, outside)  # bit for bit: the model's own path


@pytest.mark.parametrize("kernel", ["wht", "wht+gqa"])
def test_a_plan_gives_one_row_the_fast_linears(
    kernel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where W @ hᵀ is measured fastest for one row, plain steps run it too."""
    model = make_tiny_llama()
    forward = ModelForward(model)
    forward.plan = KernelPlan.only(kernel)
    kv = KVCache(model)
    ids = torch.tensor([[7]])
    with torch.inference_mode():
        forward(torch.tensor([list(range(3, 20))]), kv.cache, last_only=True)
        spy = _Spy(monkeypatch)
        fast = forward(ids, kv.cache)
        assert spy.linear_rows == []  # no linear ran through F.linear
        assert len(spy.attn_queries) == model.config.num_hidden_layers  # one query: stock sdpa
        monkeypatch.undo()
        kv.crop(17)
        stock = _stock_logits(model, ids, kv.cache, None, None)
    assert torch.allclose(fast, stock, atol=1e-4, rtol=0)
    assert torch.equal(fast.argmax(-1), stock.argmax(-1))


def test_a_stock_plan_keeps_multi_row_inputs_on_the_models_own_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = make_tiny_llama()
    forward = ModelForward(model)
    forward.plan = KernelPlan.of({1: "wht", 4: "stock", 8: "wht"})
    kv = KVCache(model)
    with torch.inference_mode():
        forward(torch.tensor([list(range(3, 20))]), kv.cache, last_only=True)
        spy = _Spy(monkeypatch)
        forward(torch.tensor([[5, 6, 7]]), kv.cache)  # 3 rows: the 4-row choice, stock
        linears = len(spy.linear_rows)
        kv.crop(17)
        forward(torch.tensor([[5, 6, 7, 8, 9, 10]]), kv.cache)  # 6 rows: W @ hᵀ
        monkeypatch.undo()
    assert linears > 0 and all(r == 3 for r in spy.linear_rows[:linears])
    assert len(spy.linear_rows) == linears  # the 6-row forward used no F.linear


def test_verifying_flag_is_scoped_and_survives_errors() -> None:
    assert not fastpath.active()
    with pytest.raises(RuntimeError), fastpath.verifying():
        assert fastpath.active()
        raise RuntimeError("boom")
    assert not fastpath.active()


def test_verifying_flag_is_per_thread() -> None:
    seen: list[bool] = []
    with fastpath.verifying():
        worker = threading.Thread(target=lambda: seen.append(fastpath.active()))
        worker.start()
        worker.join()
        assert fastpath.active()
    assert seen == [False]  # another thread (e.g. transformers' generate) keeps stock kernels


def test_off_cpu_only_the_attention_is_packed() -> None:
    """On a GPU the grouped attention still saves the per-head K/V copies; the linears keep
    their GEMMs. (Installed for "cuda" on a CPU model: install only reads the device type.)"""
    model = make_tiny_llama()
    ref = make_tiny_llama()
    assert fastpath.install(model, torch.device("cuda"))
    assert model.config._attn_implementation == fastpath.ATTN_NAME
    linears = [m for m in model.modules() if type(m) is torch.nn.Linear]
    assert linears and all("forward" not in m.__dict__ for m in linears)
    prefix, draft = list(range(3, 40)), [5, 9, 2, 7, 1]
    tree = DraftTree(draft, [-1, 0, 1, -1, 3], "t")
    lay = tree.layout()
    n = len(prefix) - 1  # cached before the verified inputs
    mask = tree_mask(lay, n, torch.float32, torch.device("cpu"))
    pos = tree_positions(lay, n, torch.device("cpu"))
    ids = torch.tensor([[prefix[-1], *draft]])
    out = []
    for m in (model, ref):
        kv = KVCache(m)
        with torch.inference_mode(), fastpath.verifying(linear=False, attention=True):
            _stock_logits(m, torch.tensor([prefix[:-1]]), kv.cache, None, None)
            out.append(_stock_logits(m, ids, kv.cache, mask, pos))
    assert torch.allclose(out[0], out[1], atol=1e-5)


def test_installing_twice_is_harmless() -> None:
    model = make_tiny_llama()
    assert fastpath.install(model, torch.device("cpu"))
    assert fastpath.install(model, torch.device("cpu"))
    eager = make_tiny_llama(attn="eager")
    assert fastpath.install(eager, torch.device("cpu"))
    assert eager.config._attn_implementation == "eager"  # only sdpa attention is replaced


@pytest.mark.model
def test_fast_verification_matches_stock_kernels_on_the_default_model(default_lm: Any) -> None:
    tok = default_lm.tokenizer
    prefix = tok("The quick brown fox jumps over the lazy dog. " * 6)["input_ids"]
    draft = tok(" The quick brown fox jumps over the lazy cat")["input_ids"]
    _compare(default_lm.model, prefix, DraftTree.sequence(draft, "t"), atol=2e-3)
    tree = DraftTree(draft[:6], [-1, 0, 1, -1, 3, 3], "t")
    _compare(default_lm.model, prefix, tree, atol=2e-3)
