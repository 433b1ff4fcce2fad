"""One model forward over new tokens with the KV cache, giving logits for every new position.

Verifying a draft needs logits at every draft position, and on a CPU the output projection
(vocab x hidden, e.g. 49152 x 576) dominates: h @ W^T for a handful of rows can run as a GEMM
~2x slower than W @ h^T, which streams the weight matrix once. For plain Llama-style heads (a
bias-free Linear, no logit scaling or soft-capping) samchat can compute logits as W @ h^T, and
on a CPU give the decoder's own linears and attention the same treatment (fastpath.py). Which
input sizes take which kernels is measured per machine (kernels.py); plain steps, one row,
take the fastest one-row kernel, so speculative speedups are against the fastest plain.
"""

from __future__ import annotations

from typing import Any

import torch

from samchat.engines.kernels import DEFAULT_PLAN, STOCK_PLAN, KernelPlan
from samchat.engines.torch import fastpath
from samchat.engines.torch.kvcache import cache_kwarg

_PLAIN_HEADS = frozenset(
    {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
)


class ModelForward:
    """`plan` picks each input size's kernels (kernels.py): the engine sets the one measured on
    this machine; until then multi-row inputs take the fast kernels and one row the model's."""

    def __init__(self, model: Any) -> None:
        import inspect

        self.model = model
        self.kwarg = cache_kwarg(model)
        self.logits_to_keep = "logits_to_keep" in inspect.signature(model.forward).parameters
        head = model.get_output_embeddings()
        decoder: Any = getattr(model, "model", None)
        cfg = model.config
        self.fast = bool(
            type(model).__name__ in _PLAIN_HEADS
            and isinstance(head, torch.nn.Linear)
            and head.bias is None
            and decoder is not None
            and not getattr(cfg, "final_logit_softcapping", None)
            and not getattr(cfg, "logit_scale", None)
        )
        device = next(model.parameters()).device
        self.patched = self.fast and fastpath.install(model, device)
        if self.fast:
            self.decoder = decoder
            self.decoder_kwarg = cache_kwarg(decoder)
            self.weight: torch.Tensor = head.weight
        self.plan: KernelPlan = DEFAULT_PLAN if self.fast else STOCK_PLAN

    def candidates(self, n: int) -> tuple[str, ...]:
        """The kernels worth timing for n inputs."""
        if not self.fast:
            return ("stock",)
        # One query row or no patched decoder: no GQA packing.
        if n == 1 or not self.patched:
            return ("stock", "wht")
        return ("stock", "wht", "wht+gqa")

    def __call__(
        self,
        ids: torch.Tensor,
        cache: Any,
        mask: torch.Tensor | None = None,
        pos: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Logits (n, vocab) for ids (1, n); with last_only, (1, vocab) when supported."""
        kwargs: dict[str, Any] = {"use_cache": True}
        if mask is not None:
            kwargs["attention_mask"] = mask
        if pos is not None:
            kwargs["position_ids"] = pos
        n = ids.shape[1]
        if self.fast and not last_only and n <= fastpath.MAX_ROWS:
            linear, attention = self.plan.flags(n)
            if linear or attention:
                kwargs[self.decoder_kwarg] = cache
                with fastpath.verifying(linear, attention):
                    hidden = self.decoder(input_ids=ids, **kwargs).last_hidden_state[0]
                if linear:
                    rows = torch.mm(self.weight, hidden.t()).t().contiguous()
                else:
                    rows = torch.nn.functional.linear(hidden, self.weight)
                return rows[:n]
        kwargs[self.kwarg] = cache
        if last_only and self.logits_to_keep:
            kwargs["logits_to_keep"] = 1
        logits: torch.Tensor = self.model(input_ids=ids, **kwargs).logits[0]
        return logits

    def last_rows(self, ids: torch.Tensor, cache: Any, rows: int) -> torch.Tensor:
        """Logits of the last `rows` inputs through the model's own path: the decoder runs
        exactly as for a prefill that keeps only the last row, so the cache is the same."""
        kwargs: dict[str, Any] = {"use_cache": True, self.kwarg: cache}
        rows = min(rows, int(ids.shape[1]))
        if self.logits_to_keep:
            kwargs["logits_to_keep"] = rows
        logits: torch.Tensor = self.model(input_ids=ids, **kwargs).logits[0]
        return logits[-rows:]
