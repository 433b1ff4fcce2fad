"""The model's KV cache as samchat uses it: crop to a prefix, compact to an accepted tree path.

Where every layer is plain full attention with the same key/value shape, all layers' keys and
values live in one preallocated buffer (a slab): a new step writes its rows in place instead of
concatenating (which copies the whole cache, every layer, every step), a crop only moves a
length, and compacting an accepted tree path is one gather over every layer at once. That is
what a GPU wants (few, large operations) and it saves the per-step copies on a CPU too.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

# The slab grows in steps of this many rows, doubling, up to the model's context length.
GROW_ROWS = 256


def cache_kwarg(model: Any) -> str:
    """transformers 5.x renamed `past_key_values` to `cache`; accept both."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class Slab:
    """Keys and values of every layer: (layers, 2, batch, kv heads, capacity, head dim)."""

    def __init__(self, layers: int, max_rows: int) -> None:
        self.layers = layers
        self.max_rows = max_rows
        self.buf: torch.Tensor | None = None
        # Static steps (graphs.py): while `window` > 0, layers write their new rows at
        # `start` (a tensor, so that a captured step reads it at replay) and return the first
        # `window` rows, masked beyond the cache: every shape is fixed.
        self.start: torch.Tensor | None = None
        self.window = 0

    def fix(self, like: torch.Tensor, rows: int) -> torch.Tensor:
        """Allocate, once, a zeroed buffer of `rows` rows that never moves (a captured step
        keeps its address); zeros because masked rows still enter the attention's sums."""
        if self.buf is None or self.capacity < rows:
            b, h, _, d = like.shape
            self.buf = torch.zeros(
                (self.layers, 2, b, h, rows, d), dtype=like.dtype, device=like.device
            )  # fmt: skip
            self.start = torch.zeros((), dtype=torch.long, device=like.device)
        return self.buf

    @property
    def capacity(self) -> int:
        return 0 if self.buf is None else int(self.buf.shape[-2])

    def reserve(self, like: torch.Tensor, rows: int) -> torch.Tensor:
        """The buffer, grown (all layers in one copy) to hold at least `rows` rows of `like`'s
        batch, heads, head dim, dtype and device."""
        buf = self.buf
        b, h, _, d = like.shape
        if buf is not None and (buf.shape[2:4], buf.shape[-1]) != ((b, h), d):
            raise RuntimeError(
                f"KV cache layers differ in shape ({tuple(buf.shape[2:4])}, {buf.shape[-1]}) "
                f"vs ({b}, {h}), {d}"
            )
        if buf is not None and buf.shape[-2] >= rows:
            return buf
        if self.start is not None:  # fixed: captured steps hold its address
            raise RuntimeError(f"the KV cache holds {self.capacity} rows; {rows} do not fit")
        cap = max(rows, 2 * self.capacity, GROW_ROWS)
        cap = -(-cap // GROW_ROWS) * GROW_ROWS
        if self.max_rows > 0:  # never past the context length, unless asked to
            cap = max(rows, min(cap, self.max_rows))
        new = torch.empty(
            (self.layers, 2, b, h, cap, d), dtype=like.dtype, device=like.device
        )  # fmt: skip
        if buf is not None:
            new[..., : buf.shape[-2], :] = buf
        self.buf = new
        return new


class SlabLayer(DynamicLayer):  # type: ignore[misc]
    """A transformers cache layer whose keys and values are views into a shared Slab."""

    def __init__(self, slab: Slab, index: int) -> None:
        self.slab = slab
        self.index = index
        self.rows = 0
        super().__init__()

    # The mixin assigns keys/values (None) in __init__ and reset: views are derived instead.
    @property
    def keys(self) -> torch.Tensor | None:
        buf = self.slab.buf
        return None if buf is None else buf[self.index, 0, :, :, : self.rows]

    @keys.setter
    def keys(self, value: torch.Tensor | None) -> None:
        if value is not None:
            raise AttributeError("a SlabLayer's keys are written through update()")

    @property
    def values(self) -> torch.Tensor | None:
        buf = self.slab.buf
        return None if buf is None else buf[self.index, 1, :, :, : self.rows]

    @values.setter
    def values(self, value: torch.Tensor | None) -> None:
        if value is not None:
            raise AttributeError("a SlabLayer's values are written through update()")

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        window = self.slab.window
        if window:
            return self._update_static(key_states, value_states, window)
        start = self.rows
        end = start + int(key_states.shape[-2])
        buf = self.slab.reserve(key_states, end)
        buf[self.index, 0, :, :, start:end] = key_states
        buf[self.index, 1, :, :, start:end] = value_states
        self.rows = end
        self.device = buf.device
        self.is_initialized = True
        return buf[self.index, 0, :, :, :end], buf[self.index, 1, :, :, :end]

    def _update_static(
        self, key_states: torch.Tensor, value_states: torch.Tensor, window: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        buf, start = self.slab.buf, self.slab.start
        assert buf is not None and start is not None
        at = start + torch.arange(key_states.shape[-2], device=buf.device)
        keys, values = buf[self.index, 0], buf[self.index, 1]
        keys.index_copy_(2, at, key_states)
        values.index_copy_(2, at, value_states)
        return keys[:, :, :window], values[:, :, :window]

    def get_seq_length(self) -> int:
        return self.rows

    def reset(self) -> None:
        self.rows = 0
        self.is_initialized = False

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:  # transformers' legacy form: the length to keep
            self.rows = min(self.rows, tokens_to_remove)
        else:
            self.rows = max(0, self.rows + tokens_to_remove)


def _uniform(config: Any) -> bool:
    """Every layer's keys have the same heads and head size (not, e.g., per-layer lists)."""
    cfg = config.get_text_config(decoder=True)
    heads = getattr(cfg, "num_key_value_heads", None) or getattr(cfg, "num_attention_heads", None)
    return isinstance(heads, int) and not isinstance(getattr(cfg, "head_dim", 0), (list, tuple))


class KVCache:
    """A transformers cache plus the bookkeeping samchat needs. `length` is the number of
    cached rows."""

    def __init__(self, model: Any, preallocate: bool = True) -> None:
        """preallocate=False keeps transformers' growing layers (the reference the tests
        compare the slab with)."""
        self._config = model.config
        cache = DynamicCache(config=model.config)
        layers = cache.layers
        # Row gathers need plain full-attention layers.
        self.compactable = all(type(layer) is DynamicLayer for layer in layers) and bool(layers)
        self.slab: Slab | None = None
        if preallocate and self.compactable and _uniform(model.config):
            cfg = model.config.get_text_config(decoder=True)
            max_rows = int(getattr(cfg, "max_position_embeddings", 0) or 0)
            self.slab = Slab(len(layers), max_rows)
            cache.layers = [SlabLayer(self.slab, i) for i in range(len(layers))]
        self.cache = cache

    @property
    def length(self) -> int:
        return int(self.cache.get_seq_length())

    def advance(self, rows: int) -> None:
        """Count `rows` more cached rows (a static step wrote them: see Slab.window)."""
        for layer in self.cache.layers:
            layer.rows += rows
            layer.is_initialized = True

    def reset(self) -> None:
        if self.slab is not None:  # keep the buffer: the next prompt fills it again
            for layer in self.cache.layers:
                layer.reset()
        else:
            self.cache = DynamicCache(config=self._config)

    def crop(self, length: int) -> None:
        """Keep the first `length` rows."""
        drop = self.length - length
        if drop <= 0:
            return
        if length == 0:
            self.reset()
            return
        if self.slab is not None:
            for layer in self.cache.layers:
                layer.crop(length)
        elif self.compactable:
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
        end = start + len(keep)
        buf = self.slab.buf if self.slab is not None else None
        if buf is not None:
            src = torch.tensor(keep[first:], device=buf.device) + start
            buf[..., start + first : end, :] = buf.index_select(-2, src)  # every layer at once
            self.crop(end)
            return
        src = torch.tensor(keep[first:], device=self.cache.layers[0].keys.device) + start
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                t = getattr(layer, name)
                t[..., start + first : end, :] = t.index_select(-2, src)
                setattr(layer, name, t[..., :end, :])
