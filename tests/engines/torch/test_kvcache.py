"""The preallocated KV cache (one slab for every layer) against transformers' growing cache:
the same forwards, crops and tree-path compactions leave the same keys, values and logits."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from samchat.engines.torch.forward import ModelForward
from samchat.engines.torch.kvcache import GROW_ROWS, KVCache, SlabLayer
from tests.tiny import TINY_VOCAB, make_tiny_llama

MODEL = make_tiny_llama()
FORWARD = ModelForward(MODEL)

# One operation: ("forward", tokens) | ("crop", rows to drop) | ("compact", tree path picks).
Op = tuple[str, list[int]]


TOKENS = st.integers(0, TINY_VOCAB - 1)


@st.composite
def operations(draw: st.DrawFn) -> list[Op]:
    ops: list[Op] = [("forward", draw(st.lists(TOKENS, min_size=1, max_size=40)))]
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["forward", "forward", "crop", "compact"]))
        size = draw(st.integers(1, 40 if kind == "forward" else 8))
        ops.append((kind, draw(st.lists(TOKENS, min_size=size, max_size=size))))
    return ops


def _apply(kv: KVCache, op: Op) -> None:
    kind, tokens = op
    with torch.inference_mode():
        if kind == "forward":
            FORWARD(torch.tensor([tokens]), kv.cache)
        elif kind == "crop":
            kv.crop(max(0, kv.length - len(tokens)))
        else:  # the last len(tokens) rows as a draft: keep an increasing subset of them
            n = min(len(tokens), kv.length)
            start = kv.length - n
            keep = sorted({t % n for t in tokens}) if n else []
            kv.compact(start, keep)


def _same(a: KVCache, b: KVCache) -> None:
    assert a.length == b.length
    for la, lb in zip(a.cache.layers, b.cache.layers, strict=True):
        if a.length:
            assert torch.equal(la.keys, lb.keys)
            assert torch.equal(la.values, lb.values)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations())
def test_slab_matches_the_growing_cache(ops: list[Op]) -> None:
    slab, ref = KVCache(MODEL), KVCache(MODEL, preallocate=False)
    assert slab.slab is not None and ref.slab is None
    for op in ops:
        _apply(slab, op)
        _apply(ref, op)
        _same(slab, ref)
    with torch.inference_mode():
        nxt = torch.tensor([[3, 1, 4]])
        assert torch.equal(FORWARD(nxt, slab.cache), FORWARD(nxt, ref.cache))
    _same(slab, ref)


def test_steps_write_in_place_and_growth_keeps_rows() -> None:
    kv, ref = KVCache(MODEL), KVCache(MODEL, preallocate=False)
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, TINY_VOCAB, (1, GROW_ROWS - 8), generator=gen)
    with torch.inference_mode():
        for cache in (kv, ref):
            FORWARD(prompt, cache.cache)
        assert kv.slab is not None and kv.slab.buf is not None
        buf = kv.slab.buf
        assert kv.slab.capacity == GROW_ROWS
        for t in range(8):  # fills the slab exactly: no new buffer
            for cache in (kv, ref):
                FORWARD(torch.tensor([[t]]), cache.cache)
        assert kv.slab.buf is buf
        kv.compact(GROW_ROWS - 4, [0, 2])
        ref.compact(GROW_ROWS - 4, [0, 2])
        assert kv.slab.buf is buf  # compaction gathers inside the same buffer
        _same(kv, ref)
        more = torch.randint(0, TINY_VOCAB, (1, 30), generator=gen)
        for cache in (kv, ref):  # past the capacity: one bigger buffer, rows carried over
            FORWARD(more, cache.cache)
        assert kv.slab.buf is not buf and kv.slab.capacity >= kv.length
        _same(kv, ref)


def test_reset_keeps_the_buffer_and_empties_the_cache() -> None:
    kv = KVCache(MODEL)
    with torch.inference_mode():
        FORWARD(torch.tensor([[1, 2, 3]]), kv.cache)
        assert kv.slab is not None
        buf = kv.slab.buf
        kv.reset()
        assert kv.length == 0 and kv.slab.buf is buf
        out = FORWARD(torch.tensor([[1, 2, 3]]), kv.cache)
    ref = KVCache(MODEL, preallocate=False)
    with torch.inference_mode():
        assert torch.equal(out, FORWARD(torch.tensor([[1, 2, 3]]), ref.cache))
    assert all(isinstance(layer, SlabLayer) for layer in kv.cache.layers)


def test_layers_of_another_shape_are_refused_not_mixed() -> None:
    kv = KVCache(MODEL)
    layer: Any = kv.cache.layers[0]
    layer.update(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))
    try:
        kv.cache.layers[1].update(torch.zeros(1, 3, 3, 8), torch.zeros(1, 3, 3, 8))
    except RuntimeError as exc:
        assert "differ in shape" in str(exc)
    else:
        raise AssertionError("a layer of another shape was written into the slab")
