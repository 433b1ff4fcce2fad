"""Decode and verify steps of fixed shapes, replayed as CUDA graphs (`--cuda-graphs`).

A small model's step on a GPU is mostly launch overhead: hundreds of kernels, each a few
microseconds of work. A CUDA graph launches them all at once. It needs every shape and address
fixed, so a step of n new tokens runs as one of a few fixed shapes:
- rows: n padded to the next power of two (padding rows write past the real ones, where the
  next step overwrites them, and attend to row 0 only);
- keys: the first `window` rows of a KV buffer allocated once for the whole context, the window
  a power of two (at least WINDOW_MIN), masked beyond the cache;
- inputs: token ids, positions, the mask and the write position live in buffers per shape.
Each shape is captured the first time it runs. Without capture (a CPU, and the tests) the same
padded, masked step runs eagerly: everything but the capture is the code a GPU replays.
Plain and drafted steps both take this path, so greedy output stays identical between them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from samchat.engines.torch.fastpath import MAX_ROWS
from samchat.engines.torch.forward import ModelForward
from samchat.engines.torch.kvcache import KVCache

if TYPE_CHECKING:
    from samchat.engines.layout import TreeLayout

WINDOW_MIN = 256


def bucket(n: int, least: int = 1) -> int:
    """The power of two at or above max(n, least)."""
    size = least
    while size < n:
        size *= 2
    return size


@dataclass
class _Shape:
    ids: torch.Tensor  # (1, rows)
    pos: torch.Tensor  # (1, rows)
    mask: torch.Tensor  # (1, 1, rows, window)
    out: torch.Tensor | None = None  # the captured step's logits
    graph: Any = None  # torch.cuda.CUDAGraph


class StaticSteps:
    """Steps of up to MAX_ROWS tokens on `kv`'s fixed buffer; `capture` records CUDA graphs."""

    def __init__(self, forward: ModelForward, kv: KVCache, capacity: int, capture: bool) -> None:
        if kv.slab is None:
            raise ValueError("static steps need a KV slab (uniform full-attention layers)")
        model = forward.model
        cfg = model.config.get_text_config(decoder=True)
        heads = int(getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads)
        head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)
        param = next(model.parameters())
        self.device = param.device
        self.dtype = param.dtype
        like = torch.empty((1, heads, 0, head_dim), dtype=self.dtype, device=self.device)
        buf = kv.slab.fix(like, capacity)
        self.capacity = int(buf.shape[-2])
        self.forward = forward
        self.kv = kv
        self.capture = capture
        self._shapes: dict[tuple[int, int], _Shape] = {}
        self._pool: Any = None
        self._min = torch.finfo(self.dtype).min

    def fits(self, n: int) -> bool:
        """A step of n new tokens can run here (else the caller takes the ordinary path)."""
        return 0 < n <= MAX_ROWS and self.kv.length + bucket(n) <= self.capacity

    def window(self, rows: int) -> int:
        return min(self.capacity, bucket(self.kv.length + rows, WINDOW_MIN))

    @property
    def shapes(self) -> int:
        """How many step shapes ran (each a captured graph when capturing)."""
        return len(self._shapes)

    def __call__(self, ids: list[int], layout: TreeLayout | None = None) -> torch.Tensor:
        """Logits (n, vocab) of ids after the cache: a tree's inputs (`layout`) or a sequence."""
        n = len(ids)
        length = self.kv.length
        rows = bucket(n)
        window = self.window(rows)
        shape = self._shapes.get((rows, window))
        if shape is None:
            shape = _Shape(
                ids=torch.zeros((1, rows), dtype=torch.long, device=self.device),
                pos=torch.zeros((1, rows), dtype=torch.long, device=self.device),
                mask=torch.empty((1, 1, rows, window), dtype=self.dtype, device=self.device),
            )
            self._shapes[(rows, window)] = shape
        self._fill(shape, ids, layout, length)
        slab = self.kv.slab
        assert slab is not None and slab.start is not None
        slab.start.fill_(length)
        if not self.capture:
            out = self._run(shape, window)
        else:
            if shape.graph is None:
                self._record(shape, window)
            assert shape.graph is not None and shape.out is not None
            shape.graph.replay()
            out = shape.out.clone()  # the next replay overwrites shape.out
        self.kv.advance(n)
        return out[:n]

    def _fill(
        self,
        shape: _Shape,
        ids: list[int],
        layout: TreeLayout | None,
        length: int,
    ) -> None:
        n, rows = len(ids), shape.ids.shape[1]
        dev = self.device
        shape.ids.zero_()
        shape.ids[0, :n] = torch.tensor(ids, dtype=torch.long, device=dev)
        shape.pos.copy_(torch.arange(length, length + rows, device=dev).unsqueeze(0))
        mask = shape.mask[0, 0]
        mask.fill_(self._min)
        mask[:n, :length] = 0.0
        new = mask[:n, length : length + n]
        if layout is None:
            new.masked_fill_(torch.ones((n, n), dtype=torch.bool, device=dev).tril(), 0.0)
        else:
            shape.pos[0, :n] = torch.tensor(layout.depths, device=dev) + length
            rows_, cols = (torch.tensor(t, device=dev) for t in (layout.rows, layout.cols))
            new[rows_, cols] = 0.0
        mask[n:, 0] = 0.0  # padding rows attend to something: no row of NaNs

    def _run(self, shape: _Shape, window: int) -> torch.Tensor:
        slab = self.kv.slab
        assert slab is not None
        slab.window = window
        try:
            return self.forward(shape.ids, self.kv.cache, shape.mask, shape.pos)
        finally:
            slab.window = 0

    def _record(self, shape: _Shape, window: int) -> None:
        """Warm the step up on a side stream (as CUDA graph capture asks), then capture it.
        Both write the rows the real step writes next, so nothing cached is disturbed."""
        stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            self._run(shape, window)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        with torch.cuda.graph(graph, pool=self._pool):
            shape.out = self._run(shape, window)
        shape.graph = graph
