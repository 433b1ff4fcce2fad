"""Faster multi-token verification forwards (the linears on a CPU, the attention anywhere).

Two things make a forward over a few new tokens cost far more than one token on a CPU, though
both stream the same weights once:
- `x @ W^T` for a handful of rows runs as a packed GEMM; `W @ x^T` streams W once and, for
  2-4 rows, can run faster than the one-row GEMV a plain step uses (docs/benchmarks.md; which
  is faster is measured on each machine, kernels.py).
- grouped-query attention with a mask copies every layer's cached keys and values to repeat
  them per query head; packing the query heads of a group into one sequence avoids the copy.

Both apply only inside `verifying()`, which ModelForward enters for the inputs its kernel plan
(kernels.py, measured on this machine) gives them; a prefill and anything else that runs the
model (transformers' generate) keep the model's own code. Results differ from the stock
kernels by float rounding only (~1e-5).
"""

from __future__ import annotations

import threading
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from samchat.engines.base import DRAFT_ROWS

ATTN_NAME = "samchat_sdpa"
MAX_ROWS = DRAFT_ROWS  # larger inputs (prefill chunks) keep the stock kernels

_state = threading.local()
_registered = False


def active() -> bool:
    """Any fast kernel on in this thread."""
    return bool(getattr(_state, "linear", False) or getattr(_state, "attention", False))


@contextmanager
def verifying(linear: bool = True, attention: bool = True) -> Iterator[None]:
    """Run forwards of patched models on the chosen fast kernels (this thread only)."""
    prev = (getattr(_state, "linear", False), getattr(_state, "attention", False))
    _state.linear, _state.attention = linear, attention
    try:
        yield
    finally:
        _state.linear, _state.attention = prev


def _linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if (
        getattr(_state, "linear", False)
        and x.dim() == 3
        and x.shape[0] == 1
        and x.shape[1] <= MAX_ROWS
    ):
        y = torch.mm(self.weight, x[0].t()).t()
        if self.bias is not None:
            y = y + self.bias
        return y.unsqueeze(0)
    return torch.nn.functional.linear(x, self.weight, self.bias)


def _attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    rep = int(getattr(module, "num_key_value_groups", 1))
    b, heads, n, dim = query.shape
    plain = (
        not getattr(_state, "attention", False)
        or n == 1
        or n > MAX_ROWS
        or rep == 1
        or b != 1
        or dropout != 0.0
        or kwargs.get("position_bias") is not None
        or kwargs.get("softcap") is not None
        # No mask means an empty cache (stock code crops keys for it); per-head or broadcast
        # masks do not stack by group.
        or attention_mask is None
        or attention_mask.shape[1] != 1
        or attention_mask.shape[-2] != n
    )
    if plain or attention_mask is None:  # (the second test only narrows the type)
        out: tuple[torch.Tensor, None] = sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs
        )
        return out
    # Heads h = g * rep + r share key/value head g: stack the rep query heads of a group as
    # rep * n query rows, each group attending to its own key/value head, with no copies.
    q = query.reshape(1, heads // rep, rep * n, dim)
    mask = attention_mask.repeat(1, 1, rep, 1)
    attn = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=mask, scale=scaling
    )
    attn = attn.reshape(1, heads, n, value.shape[-1]).transpose(1, 2).contiguous()
    return attn, None


def _register() -> None:
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTN_NAME, _attention)
    AttentionMaskInterface.register(ATTN_NAME, sdpa_mask)
    _registered = True


def install(model: Any, device: torch.device) -> bool:
    """Patch the model's decoder for fast verification; True when patched. On a GPU only the
    attention: its GEMMs handle a few rows well, but stock sdpa with a mask still copies every
    layer's cached keys and values per query head."""
    if getattr(model, "_samchat_fastpath", False):
        return True
    decoder = getattr(model, "model", None)
    if not isinstance(decoder, torch.nn.Module):
        return False
    for mod in decoder.modules() if device.type == "cpu" else ():
        # Not quantised or other Linear subclasses, nor layers wrapped by accelerate's hooks.
        if type(mod) is torch.nn.Linear and not hasattr(mod, "_hf_hook"):
            mod.forward = types.MethodType(_linear_forward, mod)  # type: ignore[method-assign]
    config = model.config
    if getattr(config, "_attn_implementation", None) == "sdpa":
        _register()
        config._attn_implementation = ATTN_NAME
        for sub in decoder.modules():  # some models keep their own config objects
            sub_cfg = getattr(sub, "config", None)
            if sub_cfg is not None and getattr(sub_cfg, "_attn_implementation", None) == "sdpa":
                sub_cfg._attn_implementation = ATTN_NAME
    model._samchat_fastpath = True
    return True
