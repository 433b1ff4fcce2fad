"""The flat engine: packed int4/int8 weights on the CPU, the native forward (native/) or the
Python one (forward.py) behind the Engine interface. Verification rows equal one-token steps
bit for bit, so drafting is lossless, and its flat cost curve lets drafts pay."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from samchat.engines.base import EngineModel, Logits
from samchat.engines.costs.cache import CurveMemo
from samchat.engines.costs.curve import CostCurve
from samchat.engines.costs.measurement import measure_engine
from samchat.engines.flat.forward import TAIL, FlatCache, FlatModel, run
from samchat.engines.flat.idle import IdleCores
from samchat.engines.flat.native import forward as native_forward
from samchat.engines.flat.threads import ThreadChoice, default_threads

if TYPE_CHECKING:
    from samchat.engines.layout import TreeLayout


def _host(logits: torch.Tensor) -> Logits:
    out: Logits = logits.numpy()
    return out


class FlatEngine:
    name = "flat"
    device_type = "cpu"
    # Every row is computed alone, so pieces of any size give the same cache: pieces this
    # long keep a long read cancellable without costing speed.
    prefill_chunk = 512
    exact_rows = TAIL
    plain_reason: str | None = None
    tree_reason: str | None = None
    inexact_reason: str | None = None

    def __init__(
        self, lm: EngineModel, cache_dir: Path | None = None, threads: int | None = None
    ) -> None:
        model = lm.model
        if not isinstance(model, FlatModel):
            raise TypeError(f"the flat engine runs packed weights, not {type(model).__name__}")
        self.lm = lm
        self.model = model
        # The compiled forward where the weights are packed for it and it loaded, else the
        # Python one.
        self._native = self.model.native
        self.cache_dir = cache_dir  # where measured costs are kept (None: this process only)
        self._cache = FlatCache(self.model.shape)
        self._length = 0
        # After a tree forward: where it started. The native forward writes a tree's inputs
        # in place; the Python one keeps them in the scratch rows.
        self._tree_at: int | None = None
        self._in_place = self._native is not None
        # The thread count each forward runs on: chosen while running (threads.py), or the
        # count given (the machine's to measure the cost curve).
        self.threads = ThreadChoice(
            threads or default_threads(),
            adaptive=threads is None,
            idle=IdleCores().look if threads is None else None,
        )

    @property
    def length(self) -> int:
        return self._length

    def reset(self) -> None:
        self._length = self._cache.length = 0
        self._tree_at = None

    def crop(self, length: int) -> None:
        if length >= self._length:
            return
        at = self._tree_at
        if at is not None and length > at and not self._in_place:
            self._move(at, list(range(length - at)))  # the tree's first inputs, as a sequence
        self._tree_at = None
        self._length = self._cache.length = length

    def plan_read(self, cached: int, new: int) -> None:
        """One cache layout for every read."""

    def _run(self, ids: list[int], parents: list[int] | None, logits: int) -> torch.Tensor | None:
        if self._tree_at is not None:  # an uncommitted tree: gone
            self.crop(self._tree_at)
        cache = self._cache
        cache.length = self._length
        native = self._native
        choice = self.threads
        threads = choice.pick(len(ids))
        # Set for this forward only: other engines run on the same thread.
        before = torch.get_num_threads()
        if before != threads:
            torch.set_num_threads(threads)
        start = time.perf_counter()
        try:
            with torch.inference_mode():
                if native is not None:
                    cache.reserve(cache.length + len(ids))
                    out = native_forward.run(native, cache.buf, cache.length, ids, parents, logits)
                else:
                    out = run(self.model, cache, ids, parents, logits)
        finally:
            if before != threads:
                torch.set_num_threads(before)
        choice.timed(threads, len(ids), time.perf_counter() - start)
        self._length += len(ids)
        self._tree_at = self._cache.length if parents is not None else None
        return out

    def stop_reading(self) -> None:
        """A torch forward cannot stop midway: the session stops between pieces."""

    def prefill(self, ids: list[int], logits: int = 0) -> Logits | None:
        if not ids:
            return None
        out = self._run(ids, None, min(logits, len(ids)))
        self._cache.length = self._length
        return None if out is None else _host(out)

    def forward(self, ids: list[int], layout: TreeLayout | None = None) -> Logits:
        parents = None
        if layout is not None and layout.depths != list(range(layout.n)):
            parents = layout.parents  # a tree; a chain is a sequence, written in place
        out = self._run(ids, parents, len(ids))
        assert out is not None
        return _host(out)

    def _move(self, start: int, keep: list[int]) -> None:
        """Rows keep[i] of the last forward (scratch rows for a tree) to start + i."""
        cache = self._cache
        base = cache.scratch if self._tree_at is not None and not self._in_place else start
        src = torch.tensor(keep, dtype=torch.long) + base
        with torch.inference_mode():
            rows = cache.rows.index_select(2, src)
            cache.rows[:, :, start : start + len(keep)] = rows

    def commit(self, start: int, keep: list[int]) -> None:
        moved = keep != list(range(len(keep)))
        if moved or (self._tree_at is not None and not self._in_place):
            self._move(start, keep)
        self._tree_at = None
        self._length = self._cache.length = start + len(keep)

    @property
    def meter(self) -> FlatMeter:
        return FlatMeter(self)


class FlatMeter:
    """The flat engine's measuring: its cost curve, on an engine of its own (kept in lm.curves
    and the cost cache)."""

    def __init__(self, engine: FlatEngine) -> None:
        self.engine = engine
        self.lm = engine.lm
        self.curves: CurveMemo = engine.lm.curves
        self.model = engine.model
        self.cache_dir = engine.cache_dir
        self._in_place = engine._in_place
        self._threads = engine.threads.most

    def fit(self, measure: bool = True) -> None:
        """One kernel for every row count: nothing to choose."""

    def _about(self) -> dict[str, str]:
        from samchat.engines.cpu import cpu_name

        lm = self.lm
        return {
            "engine": "flat",
            "model": str(getattr(lm, "name", "")),
            "source": str(getattr(lm, "source", "")),
            "shape": f"{self.model.shape.arch}, {self.model.parameters_count} parameters",
            "device": "cpu",
            "dtype": self.model.fmt,
            "forward": "native" if self._in_place else "python",
            "cpu": cpu_name(),
            "capability": str(torch.backends.cpu.get_cpu_capability()),
            "threads": str(self._threads),
            "torch": torch.__version__,
        }

    def _digest(self) -> str:
        text = "|".join(self._about().values())
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _curve_file(self) -> Path | None:
        cache = self.cache_dir
        return cache / "costs" / f"{self._digest()}.json" if cache is not None else None

    def cached_cost_curve(self) -> CostCurve | None:
        return self.curves.known(self._digest(), self._curve_file())

    def cost_curve(self, cancelled: Callable[[], bool] | None = None) -> CostCurve:
        def measure() -> CostCurve:
            # On an engine of its own (this one's cache holds the conversation), on every
            # thread: the curve keyed by the machine's count.
            other = FlatEngine(self.lm, threads=default_threads())
            return measure_engine(other, self.model.shape.vocab, cancelled=cancelled)

        return self.curves.get(self._digest(), self._curve_file(), measure, self._about())

    def describe(self) -> str:
        cap = torch.backends.cpu.get_cpu_capability()
        # The Python forward runs torch's kernels: the same model, rounded otherwise.
        kind = "native" if self._in_place else "Python"
        note = "" if self._in_place else " on torch's kernels (not the native forward's numbers)"
        most = self._threads
        threads = f"{most} threads" + (f", or {most - 1} while faster" if most > 1 else "")
        return (
            f"flat engine, torch {torch.__version__} ({self.model.fmt} weight-only on cpu, {cap}; "
            f"{kind} {self.model.shape.arch} forward{note}, rows exact; {threads}; weights "
            f"{self.model.about})"
        )
