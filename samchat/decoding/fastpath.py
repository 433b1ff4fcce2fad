"""Faster multi-token verification forwards (the linears on a CPU, the attention anywhere).

Two things make a forward over a few new tokens cost far more than one token on a CPU, though
both stream the same weights once:
- `x @ W^T` for a handful of rows runs as a packed GEMM; `W @ x^T` streams W once and, for
  2-4 rows, runs faster than the one-row GEMV a plain step uses (measured on the reference
  2-core machine: all 210 linears of the default model, 1 row 63 ms, 2 rows 43 ms).
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

ATTN_NAME = "samchat_sdpa"
MAX_ROWS = 64  # larger inputs (prefill chunks) keep the stock kernels
# Exact mode pads every forward's keys to a multiple of this: the CPU's fused attention
# reduces keys in blocks of 512, and only full blocks reduce alike whatever the key count.
EXACT_BLOCK = 512
# ... and gives it at least this many query rows: below 4 rows it takes other code, which
# rounds differently (measured on an AMD EPYC with AVX-512 BF16).
EXACT_MIN_ROWS = 8

_state = threading.local()
_registered = False


def active() -> bool:
    """Any fast kernel on in this thread."""
    return bool(
        getattr(_state, "linear", False)
        or getattr(_state, "attention", False)
        or getattr(_state, "exact", False)
    )


@contextmanager
def verifying(linear: bool = True, attention: bool = True, exact: bool = False) -> Iterator[None]:
    """Run forwards of patched models on the chosen fast kernels (this thread only). `exact`:
    every row computed by the same arithmetic whatever the number of rows (exact_attention),
    for half precision, where a rounding difference changes greedy tokens."""
    prev = (
        getattr(_state, "linear", False),
        getattr(_state, "attention", False),
        getattr(_state, "exact", False),
    )
    _state.linear, _state.attention, _state.exact = linear, attention, exact
    try:
        yield
    finally:
        _state.linear, _state.attention, _state.exact = prev


def exact_rows(x: torch.Tensor) -> torch.Tensor:
    """x (..., rows, features) as a GEMM takes it in exact mode: contiguous (a transposed
    input, the previous W @ hᵀ's output, takes other code) and at least two rows (one row
    takes the GEMV code). Both round a few outputs differently (measured: 55 of 3,376 rows of
    the default model's linears in bfloat16 differ between one row and 2-16)."""
    if x.shape[-2] == 1:
        return torch.cat([x, torch.zeros_like(x)], dim=-2)
    return x.contiguous()


def _linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if getattr(_state, "exact", False) and x.dim() >= 2:
        rows = x.shape[-2]
        y = _linear_rows(self, exact_rows(x))
        return y[..., :rows, :] if rows == 1 else y
    return _linear_rows(self, x)


def _linear_rows(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
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
    if getattr(_state, "exact", False) and b == 1 and dropout == 0.0:
        return exact_attention(query, key, value, attention_mask, scaling, rep), None
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


def exact_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    rep: int,
) -> torch.Tensor:
    """Attention whose every row comes out bit for bit as it would alone: the query heads of
    a group stacked as rows (no copies of keys), and the keys padded with masked zeros to a
    multiple of EXACT_BLOCK, so that the fused kernel reduces every row over the same full
    blocks however many rows and cached keys a forward has. A masked key's weight is exactly
    0, so a query gives the same result after n or n + k keys."""
    _, heads, n, dim = query.shape
    length = key.shape[2]
    padded = -(-length // EXACT_BLOCK) * EXACT_BLOCK
    low = torch.finfo(query.dtype).min
    if attention_mask is None:  # one row, or a prefill's causal rows
        mask = torch.zeros(n, length, dtype=query.dtype, device=query.device)
        if n > 1:
            mask = torch.full_like(mask, low).triu(length - n + 1)
    elif attention_mask.dtype == torch.bool:  # transformers' own masks: True = attend
        zero = torch.zeros((), dtype=query.dtype, device=query.device)
        mask = torch.where(attention_mask[0, 0], zero, low)
    else:
        mask = attention_mask[0, 0].to(query.dtype)
    mask = mask.expand(n, length)
    pad = padded - length
    if pad:
        key = torch.nn.functional.pad(key, (0, 0, 0, pad))
        value = torch.nn.functional.pad(value, (0, 0, 0, pad))
        mask = torch.nn.functional.pad(mask, (0, pad), value=low)
    rows = rep * n
    q = query.reshape(1, heads // rep, rows, dim)
    mask = mask.repeat(rep, 1)
    if rows < EXACT_MIN_ROWS:  # zero rows, dropped after
        q = torch.nn.functional.pad(q, (0, 0, 0, EXACT_MIN_ROWS - rows))
        mask = torch.nn.functional.pad(mask, (0, 0, 0, EXACT_MIN_ROWS - rows))
    attn = torch.nn.functional.scaled_dot_product_attention(
        q, key, value, attn_mask=mask[None, None], scale=scaling
    )[:, :, :rows]
    return attn.reshape(1, heads, n, value.shape[-1]).transpose(1, 2).contiguous()


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
