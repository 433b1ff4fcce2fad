"""fastpath's exact mode and the check that decides, per machine, whether it holds."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from samchat.decoding import fastpath
from samchat.decoding.exactness import check_exact
from samchat.decoding.forward import ModelForward
from samchat.decoding.kernels import KernelPlan


def test_exact_rows_gives_a_gemm_two_contiguous_rows_at_least() -> None:
    one = torch.randn(1, 1, 8)
    padded = fastpath.exact_rows(one)
    assert padded.shape == (1, 2, 8) and torch.equal(padded[:, :1], one)
    assert not padded[:, 1:].any()
    wide = torch.randn(8, 3).t()  # a transposed (non-contiguous) 3-row input
    out = fastpath.exact_rows(wide)
    assert out.is_contiguous() and torch.equal(out, wide)


def test_exact_attention_pads_keys_and_rows_and_masks_the_padding() -> None:
    """Whatever the padding, a row's result is attention over its own visible keys, and a
    boolean mask (transformers' own) means the same as the additive one."""
    torch.manual_seed(0)
    q = torch.randn(1, 6, 2, 16)  # 6 query heads, 2 key/value heads: groups of 3
    k, v = torch.randn(1, 2, 37, 16), torch.randn(1, 2, 37, 16)
    visible = torch.ones(2, 37, dtype=torch.bool)
    visible[0, 36] = False  # row 0 does not see the last key
    additive = torch.zeros(2, 37).masked_fill(~visible, torch.finfo(torch.float32).min)
    out = fastpath.exact_attention(q, k, v, additive[None, None], None, rep=3)
    same = fastpath.exact_attention(q, k, v, visible[None, None], None, rep=3)
    assert out.shape == (1, 2, 6, 16) and torch.equal(out, same)
    for row in range(2):
        keys = int(visible[row].sum())
        for head in range(6):
            group = head // 3
            ref = torch.nn.functional.scaled_dot_product_attention(
                q[:, head, row], k[:, group, :keys], v[:, group, :keys]
            )
            assert torch.allclose(out[0, row, head], ref[0], atol=1e-5)


@pytest.mark.model
def test_the_check_catches_rows_that_round_differently(monkeypatch: pytest.MonkeyPatch) -> None:
    """A verification row one ulp away from one-row decoding fails the check."""
    from samchat.models import load_model
    from samchat.models.loader import ModelSpec

    lm = load_model(ModelSpec(engine="torch", dtype="bfloat16"))
    forward = ModelForward(lm.model)
    forward.plan = KernelPlan.only("stock")
    forward.exact = True
    real = fastpath.exact_attention

    def nudged(query: torch.Tensor, *args: Any) -> torch.Tensor:
        out = real(query, *args)
        if query.shape[2] > 1:  # multi-row forwards only
            out = torch.nextafter(out, torch.full_like(out, float("inf")))
        return out

    monkeypatch.setattr(fastpath, "exact_attention", nudged)
    assert not check_exact(forward, lm.model, torch.device("cpu"))
