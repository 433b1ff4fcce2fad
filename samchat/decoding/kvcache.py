"""The model's KV cache as samchat uses it: crop to a prefix, compact to an accepted tree path."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def cache_kwarg(model: Any) -> str:
    """transformers 5.x renamed `past_key_values` to `cache`; accept both."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class KVCache:
    """A DynamicCache plus the bookkeeping samchat needs. `length` is the number of cached rows."""

    def __init__(self, model: Any) -> None:
        self._config = model.config
        self.cache = DynamicCache(config=model.config)
        # Row gathers touch .keys/.values directly: only plain full-attention layers allow it.
        self.compactable = all(type(layer) is DynamicLayer for layer in self.cache.layers) and bool(
            self.cache.layers
        )

    @property
    def length(self) -> int:
        return int(self.cache.get_seq_length())

    def reset(self) -> None:
        self.cache = DynamicCache(config=self._config)

    def crop(self, length: int) -> None:
        """Keep the first `length` rows."""
        drop = self.length - length
        if drop <= 0:
            return
        if length == 0:
            self.reset()
            return
        if self.compactable:
            for layer in self.cache.layers:
                layer.keys = layer.keys[..., :length, :]
                layer.values = layer.values[..., :length, :]
        else:
            self.cache.crop(-drop)

    def compact(self, start: int, keep: list[int]) -> None:
        """Rows start + keep[i] move to start + i, then everything past start + len(keep) goes.
        keep is increasing (an accepted path through a topologically ordered tree)."""
        if keep == list(range(len(keep))):
            self.crop(start + len(keep))
            return
        if not self.compactable:
            raise RuntimeError("this model's KV cache layers cannot be compacted")
        first = next(i for i, k in enumerate(keep) if k != i)
        src = torch.tensor(keep[first:], device=self.cache.layers[0].keys.device) + start
        end = start + len(keep)
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                t[..., start + first : end, :] = t.index_select(-2, src)
                setattr(layer, name, t[..., :end, :])
