"""The torch engine: a Hugging Face causal LM with a DynamicCache, on any torch device."""

from __future__ import annotations

import hashlib
import weakref
from typing import TYPE_CHECKING, Any

import torch

from samchat.decoding import fastpath
from samchat.decoding.budget import CostCurve, load_or_measure, measure_cost_curve
from samchat.decoding.forward import ModelForward
from samchat.decoding.kvcache import KVCache

if TYPE_CHECKING:
    from samchat.decoding.tree import TreeLayout

# Per model object and device, weakly: an id() key could be reused by a later model.
_CURVES: weakref.WeakKeyDictionary[Any, dict[str, CostCurve]] = weakref.WeakKeyDictionary()


class TorchEngine:
    name = "torch"

    def __init__(self, lm: Any) -> None:
        self.lm = lm
        self.model = lm.model
        self.device: torch.device = lm.device
        self.dtype: torch.dtype = next(self.model.parameters()).dtype
        self._kv = KVCache(self.model)
        self._fwd = ModelForward(self.model)
        self.plain_reason: str | None = None
        self.tree_reason: str | None = None
        impl = str(getattr(self.model.config, "_attn_implementation", None) or "eager")
        if not self._kv.compactable:
            self.plain_reason = "its KV cache layers (sliding window or other) cannot be compacted"
        elif impl not in ("eager", "sdpa", fastpath.ATTN_NAME):
            self.tree_reason = f"attention implementation {impl!r} takes no 4D tree mask"

    @property
    def length(self) -> int:
        return self._kv.length

    def reset(self) -> None:
        self._kv.reset()

    def crop(self, length: int) -> None:
        self._kv.crop(length)

    def _run(
        self,
        ids: list[int],
        mask: torch.Tensor | None = None,
        pos: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        return self._fwd(inp, self._kv.cache, mask, pos, last_only)

    def prefill(self, ids: list[int], logits: int = 0) -> torch.Tensor | None:
        with torch.inference_mode():
            if logits <= 0:
                self._run(ids, last_only=True)
                return None
            inp = torch.tensor([ids], dtype=torch.long, device=self.device)
            return self._fwd.last_rows(inp, self._kv.cache, logits).float()

    def forward(self, ids: list[int], layout: TreeLayout | None = None) -> torch.Tensor:
        with torch.inference_mode():
            if layout is None:
                return self._run(ids)
            n = self._kv.length
            mask = layout.attention_mask(n, self.dtype, self.device)
            return self._run(ids, mask, layout.position_ids(n, self.device))

    def commit(self, start: int, keep: list[int]) -> None:
        self._kv.compact(start, keep)

    def cost_curve(self) -> CostCurve:
        per_device = _CURVES.setdefault(self.model, {})
        key = str(self.device)
        curve = per_device.get(key)
        if curve is None:
            from samchat.paths import cache_dir

            lm = self.lm
            ident = f"{getattr(lm, 'source', '')}|{getattr(lm, 'name', '')}"
            ident += f"|{self.device}|{self.dtype}"
            digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
            model, device = self.model, self.device
            curve = load_or_measure(
                lambda: measure_cost_curve(model, device),
                cache_dir() / "costs" / f"{digest}.json",
            )
            per_device[key] = curve
        return curve

    def describe(self) -> str:
        kernels = "W @ hᵀ verification" if self._fwd.fast else "the model's own kernels"
        dtype = str(self.dtype).removeprefix("torch.")
        return f"torch {torch.__version__} ({dtype} on {self.device}, {kernels})"
