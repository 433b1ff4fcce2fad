"""The torch engine: a Hugging Face causal LM with samchat's KV cache (a preallocated slab where the
layers allow), on any torch device."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import torch

from samchat.engines.base import DRAFT_ROWS, Engine, EngineModel, Logits
from samchat.engines.costs.curve import CostCurve
from samchat.engines.costs.measurement import measure_engine
from samchat.engines.kernels import DEFAULT_PLAN, KernelPlan
from samchat.engines.torch import fastpath
from samchat.engines.torch.forward import ModelForward
from samchat.engines.torch.graphs import StaticSteps
from samchat.engines.torch.kvcache import KVCache
from samchat.engines.torch.measure import measure_cost_curve
from samchat.names import STEP_MODES, StepMode, named

if TYPE_CHECKING:
    from samchat.engines.layout import TreeLayout
    from samchat.engines.weights import Device


class TorchModel(EngineModel, Protocol):
    """A loaded model as the torch engine reads it (a samchat.models LoadedModel)."""

    @property
    def device(self) -> Device | str: ...  # a torch.device

    @property
    def steps(self) -> str: ...  # as it was loaded to run its steps (STEP_MODES)


def hf_model(model: object) -> Any:
    """A loaded model's weights as a Hugging Face model (transformers is Any to mypy)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"the torch engine runs torch modules, not {type(model).__name__}")
    return model


def tree_positions(layout: TreeLayout, cached_len: int, device: torch.device) -> torch.Tensor:
    """(1, n) positions: each input at the cache length plus its depth in the tree."""
    return (torch.tensor(layout.depths, device=device) + cached_len).unsqueeze(0)


def tree_mask(
    layout: TreeLayout, cached_len: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """(1, 1, n, cached_len + n) float mask: 0 = attend, dtype-min = blocked. Each input
    attends to the whole cache plus its own ancestors in the tree (itself included)."""
    n = layout.n
    mask = torch.full((n, cached_len + n), torch.finfo(dtype).min, dtype=dtype, device=device)
    mask[:, :cached_len] = 0.0
    block = mask[:, cached_len:]
    block[layout.rows, layout.cols] = 0.0
    return mask.view(1, 1, n, cached_len + n)


def host(logits: torch.Tensor) -> Logits:
    """Logits as the decoding loop reads them: float32 on the host (a view on a CPU)."""
    out: Logits = logits.float().cpu().numpy()
    return out


class TorchEngine:
    name = "torch"
    # A prompt of up to this many tokens is one forward, as in transformers' generate() (the
    # reference the tests compare with); pieces would round differently on this engine.
    prefill_chunk = 2048
    exact_rows = DRAFT_ROWS  # a draft tree's most nodes, with its root

    def __init__(
        self, lm: TorchModel, cache_dir: Path | None = None, steps: StepMode | None = None
    ) -> None:
        """steps: "dynamic" (every step its own shapes), "graphs" (fixed shapes replayed as
        CUDA graphs: graphs.py) or "static" (the same fixed shapes, run eagerly: how the tests
        check that path on a CPU), "auto" (graphs where the device and the KV cache allow them,
        else dynamic); None: as the model was loaded (lm.steps)."""
        self.lm = lm
        self.cache_dir = cache_dir  # where measured costs are kept (None: this process only)
        self.model = hf_model(lm.model)
        self.device = torch.device(str(lm.device))
        self.device_type = self.device.type
        self.dtype: torch.dtype = next(self.model.parameters()).dtype
        self._kv = KVCache(self.model)
        self._fwd = ModelForward(self.model)
        self.steps: StepMode = steps or named(lm.steps, STEP_MODES)
        if self.steps == "auto":
            usable = self.device.type == "cuda" and self._kv.slab is not None
            self.steps = "graphs" if usable else "dynamic"
        if self.steps == "graphs" and self.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self._static: StaticSteps | None = None
        if self.steps != "dynamic" and self._kv.slab is not None:
            self._static = StaticSteps(
                self._fwd, self._kv, int(lm.context_limit), capture=self.steps == "graphs"
            )
        elif self.steps != "dynamic":
            raise ValueError(f"{self.steps} steps need uniform full-attention KV cache layers")
        self._params = sum(p.numel() for p in self.model.parameters())
        self.plain_reason: str | None = None
        self.tree_reason: str | None = None
        self.inexact_reason: str | None = None
        if self.dtype in (torch.bfloat16, torch.float16):
            # A multi-row forward rounds differently from a one-row one, and half precision
            # turns that into different tokens, on CPUs and GPUs alike (docs/benchmarks.md;
            # an exact mode with one arithmetic for every row count was tried and withdrawn).
            name = str(self.dtype).removeprefix("torch.")
            self.inexact_reason = (
                f"in {name}, drafted replies can differ from plain decoding (verification rounds "
                "differently); use --dtype float32 for identical output"
            )
        impl = str(getattr(self.model.config, "_attn_implementation", None) or "eager")
        if not self._kv.compactable:
            self.plain_reason = "its KV cache layers (sliding window or other) cannot be compacted"
        elif impl not in ("eager", "sdpa", fastpath.ATTN_NAME):
            self.tree_reason = f"attention implementation {impl!r} takes no 4D tree mask"
        self._meter = TorchMeter(self)

    @property
    def length(self) -> int:
        return self._kv.length

    def reset(self) -> None:
        self._kv.reset()

    def crop(self, length: int) -> None:
        with torch.inference_mode():  # the cache's tensors were made in it
            self._kv.crop(length)

    def plan_read(self, cached: int, new: int) -> None:
        """One cache layout for every read."""

    def _run(
        self,
        ids: list[int],
        mask: torch.Tensor | None = None,
        pos: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        return self._fwd(inp, self._kv.cache, mask, pos, last_only)

    def stop_reading(self) -> None:
        """A torch forward cannot stop midway: the session stops between pieces."""

    def prefill(self, ids: list[int], logits: int = 0) -> Logits | None:
        with torch.inference_mode():
            if logits <= 0:
                self._run(ids, last_only=True)
                return None
            inp = torch.tensor([ids], dtype=torch.long, device=self.device)
            return host(self._fwd.last_rows(inp, self._kv.cache, logits))

    def forward(self, ids: list[int], layout: TreeLayout | None = None) -> Logits:
        return host(self._forward(ids, layout))

    def _forward(self, ids: list[int], layout: TreeLayout | None) -> torch.Tensor:
        with torch.inference_mode():
            static = self._static
            if static is not None and static.fits(len(ids)):
                return static(ids, layout)
            if layout is None:
                return self._run(ids)
            n = self._kv.length
            mask = tree_mask(layout, n, self.dtype, self.device)
            return self._run(ids, mask, tree_positions(layout, n, self.device))

    def commit(self, start: int, keep: list[int]) -> None:
        with torch.inference_mode():
            self._kv.compact(start, keep)

    @property
    def meter(self) -> TorchMeter:
        return self._meter


class TorchMeter:
    """The torch engine's measuring: its cost curve and kernel plan (measured once per model,
    dtype, device, CPU and torch version, then kept in lm.curves and the cost cache)."""

    def __init__(self, engine: TorchEngine) -> None:
        self.engine = engine
        self.curves = engine.lm.curves

    def fit(self, measure: bool = True) -> None:
        """Take the kernels measured fastest on this machine for each input size (measured with
        the cost curve). Not measured yet and measure=False: those of ordinary steps for
        fixed-shape ones, else the default kernels for now."""
        fwd = self.engine._fwd
        if fwd.fast:
            curve = self.cost_curve() if measure else self.cached_cost_curve()
            plan = curve.kernels if curve is not None else None
            if plan is None and self.engine._static is not None:
                plan = self._dynamic_kernels()
            fwd.plan = plan or DEFAULT_PLAN

    def _curve_file(self, digest: str | None = None) -> Path | None:
        cache = self.engine.cache_dir
        name = digest or self._digest()
        return cache / "costs" / f"{name}.json" if cache is not None else None

    def cached_cost_curve(self) -> CostCurve | None:
        return self.curves.known(self._digest(), self._curve_file())

    def _about(self) -> dict[str, str]:
        """What a measurement is of: it holds for every model object loaded from the same
        weights, in the same dtype, on the same device, CPU and torch."""
        from samchat.engines.cpu import cpu_name

        engine = self.engine
        lm = engine.lm
        about = {
            "engine": "torch",
            "model": str(getattr(lm, "name", "")),
            "source": str(getattr(lm, "source", "")),
            "shape": f"{type(engine.model).__name__}, {engine._params} parameters",
            "device": str(engine.device),
            "dtype": str(engine.dtype).removeprefix("torch."),
            "cpu": cpu_name(),
            "torch": torch.__version__,
        }
        if engine.steps != "dynamic":
            about["steps"] = engine.steps
        return about

    def _digest(self, about: dict[str, str] | None = None) -> str:
        text = "|".join((about or self._about()).values())
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _ordinary_about(self) -> dict[str, str]:
        """What ordinary steps of this model are measured as (fixed steps add "steps")."""
        about = self._about()
        about.pop("steps", None)
        return about

    def _dynamic_kernels(self) -> KernelPlan | None:
        """The kernel plan already measured for this model on ordinary steps, if any: fixed
        steps run the same kernels."""
        digest = self._digest(self._ordinary_about())
        curve = self.curves.known(digest, self._curve_file(digest))
        return curve.kernels if curve is not None else None

    def cost_curve(self, cancelled: Callable[[], bool] | None = None) -> CostCurve:
        engine = self.engine
        model, device, static = engine.model, engine.device, engine._static

        def measure() -> CostCurve:
            kernels = self._dynamic_kernels() if static is not None else None
            if kernels is None:
                measured = measure_cost_curve(model, device, cancelled=cancelled)
                if static is None:
                    return measured
                # What ordinary steps of this model will read, not measure, later.
                ordinary = self._ordinary_about()
                self.curves.curves[self._digest(ordinary)] = measured
                self.curves.keep(measured, self._curve_file(self._digest(ordinary)), ordinary)
                kernels = measured.kernels
            # The kernels of ordinary steps; the costs as fixed-shape steps run them.
            engine._fwd.plan = kernels or DEFAULT_PLAN
            curve = measure_engine(engine, int(model.config.vocab_size), cancelled=cancelled)
            curve.kernels = kernels
            return curve

        return self.curves.get(self._digest(), self._curve_file(), measure, self._about())

    def describe(self) -> str:
        engine = self.engine
        dtype = str(engine.dtype).removeprefix("torch.")
        graphs = "; CUDA graphs" if engine.steps == "graphs" else ""
        return (
            f"torch {torch.__version__} ({dtype} on {engine.device}; kernels: {self.kernels()}"
            f"{graphs})"
        )

    def kernels(self) -> str:
        """The kernel plan in words, or why there is none yet."""
        if not self.engine._fwd.fast:
            return "the model's own"
        curve = self.curves.curves.get(self._digest())
        if curve is None or curve.kernels is None:
            return "chosen by measurement at the first reply"
        return curve.kernels.describe()


def open_engine(lm: TorchModel, cache_dir: Path | None = None) -> Engine:
    """The torch engine for lm: the lean forward for packed int4/int8 weights, else the
    Hugging Face model's own."""
    from samchat.engines.flat.forward import LeanModel

    if isinstance(lm.model, LeanModel):
        from samchat.engines.flat.engine import LeanEngine

        return LeanEngine(lm, cache_dir=cache_dir)
    return TorchEngine(lm, cache_dir=cache_dir)
