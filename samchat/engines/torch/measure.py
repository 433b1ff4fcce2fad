"""The torch engine's own measurement: each kernel candidate's forward at each size, the
fastest kept per size (the curve carries that plan)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from samchat.engines.costs import SIZES, CostCurve, MeasurementCancelled
from samchat.engines.kernels import KernelPlan, measure_kernels
from samchat.engines.torch.forward import ModelForward
from samchat.engines.torch.kvcache import KVCache


def measure_cost_curve(
    model: Any,
    device: Any,
    context: int = 256,
    reps: int = 4,
    cancelled: Callable[[], bool] | None = None,
) -> CostCurve:
    """Time forwards of 1, 2, 4 ... 64 new tokens after `context` cached tokens, on each kernel
    candidate (kernels.py), and keep the fastest per size: the curve is relative to the
    fastest one-row forward, and carries the plan as `kernels`.

    Sizes and kernels are interleaved round by round and each keeps its median time, so that
    bursts of load from other processes hit all alike (the fastest of a few runs is a lucky
    draw that flatters single-token forwards most)."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    with torch.inference_mode():
        kv = KVCache(model)
        forward = ModelForward(model)  # the same path verification takes
        vocab = int(model.config.vocab_size)
        gen = torch.Generator().manual_seed(0)
        ctx = torch.randint(0, vocab, (1, context), generator=gen).to(device)
        forward(ctx, kv.cache, last_only=True)
        inputs = {n: torch.randint(0, vocab, (1, n), generator=gen).to(device) for n in SIZES}

        def run(n: int, kernel: str) -> float:
            if cancelled is not None and cancelled():
                raise MeasurementCancelled("the cost-curve measurement was stopped")
            forward.plan = KernelPlan.only(kernel)
            sync()
            t0 = time.perf_counter()
            forward(inputs[n], kv.cache)
            sync()
            dt = time.perf_counter() - t0
            kv.crop(context)
            return dt

        plan, med = measure_kernels(run, SIZES, forward.candidates, reps)
    return CostCurve({n: t / med[1] for n, t in med.items()}, kernels=plan)
