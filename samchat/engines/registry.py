"""The engines by name. The loader, the CLI, the benchmarks and the server ask an engine's kind
what it can do (run a GGUF file as it is, take torch's options, run on a device) instead of
comparing names, and the loader loads weights through it, so a new engine is one entry here and
its own package.

Importing this module imports no engine: an engine's package is imported when one opens.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from samchat.engines.base import DEVICE_TYPES

if TYPE_CHECKING:
    from samchat.engines.base import Engine, EngineModel
    from samchat.engines.weights import ModelFiles, WeightOptions, Weights, WeightsRequest

AUTO = "auto"
# llama.cpp allocates its whole KV cache up front: a model trained on 128k tokens would take
# gigabytes before the first reply, so its context stops here.
GGUF_MAX_CONTEXT = 8192


def _attr(ref: str) -> Any:
    """The object a "module:name" reference names (its module imported now)."""
    module, _, name = ref.partition(":")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


# The weights are each engine's own type (Weights.model): these read them by attribute.
def _hf_context(model: Any) -> int:
    limit = getattr(model.config, "max_position_embeddings", None)
    return int(limit) if limit else 2048


def _hf_vocab(model: Any) -> int:
    return int(model.config.vocab_size)


def _gguf_context(model: Any) -> int:
    return min(int(model.n_ctx_train), GGUF_MAX_CONTEXT)


def _gguf_vocab(model: Any) -> int:
    return int(model.n_vocab)


@dataclass(frozen=True)
class EngineKind:
    name: str  # as the CLI, config.toml and LoadedModel.engine spell it
    label: str  # as messages name it
    # Runs a GGUF file in its own types (no conversion); otherwise GGUF files are converted.
    native_gguf: bool
    # Takes --dtype, --quantize and --cuda-graphs (torch's options).
    torch_options: bool
    devices: tuple[str, ...]  # where it runs
    engine_class: str  # "module:Class" of its Engine, constructed as Class(lm, cache_dir=...)
    context_limit: Callable[[Any], int]  # of a loaded model's weights (Weights.model)
    vocab_size: Callable[[Any], int]
    # "module:function" loading the weights: function(WeightsRequest) -> Weights.
    weights: str
    availability: str | None = None  # "module:function" giving why it cannot run here, or None
    # "module:function" refusing options the engine cannot take, before anything heavy is
    # imported (so a typo is answered at once): function(WeightOptions); None: no checks.
    option_checks: str | None = None
    # "module:function" giving the files the engine reads for a model found (a GGUF converted
    # once, say): function(WeightsRequest) -> ModelFiles; None: the files as found.
    prepare: str | None = None
    # "module:function" giving the device type `--device auto` takes here; None: the CPU.
    auto_device: str | None = None
    # The --dtype values it takes besides "auto" (none: it runs a GGUF file's own types).
    dtypes: tuple[str, ...] = ()
    # "module:function" choosing the Engine for a loaded model, where the kind has several
    # (called as function(lm, cache_dir=...)); None: engine_class.
    opener: str | None = None
    # "module:function" naming the build of the engine that runs here, without importing it:
    # function(model cache dir) -> str. Speeds kept for a model are kept per build, since a
    # fallback build (the flat engine's Python forward) runs at another speed. None: one build.
    build: str | None = None

    def open(self, lm: EngineModel, cache_dir: Path | None = None) -> Engine:
        engine: Engine = _attr(self.opener or self.engine_class)(lm, cache_dir=cache_dir)
        return engine

    def check_options(self, options: WeightOptions) -> None:
        """ModelLoadError for options this engine cannot take (it imports no torch)."""
        if self.option_checks is not None:
            _attr(self.option_checks)(options)

    def prepare_files(self, request: WeightsRequest) -> ModelFiles:
        """The files this engine reads for request.files (ModelLoadError if it can't)."""
        if self.prepare is None:
            return request.files
        files: ModelFiles = _attr(self.prepare)(request)
        return files

    def load_weights(self, request: WeightsRequest) -> Weights:
        """The weights of request.files as this engine runs them (ModelLoadError if it can't)."""
        weights: Weights = _attr(self.weights)(request)
        return weights

    def auto_device_type(self) -> str:
        """Where `--device auto` runs this engine here: "cpu", "cuda" or "mps"."""
        if self.auto_device is None:
            return "cpu"
        device: str = _attr(self.auto_device)()
        return device

    def build_name(self, model_cache: Path) -> str:
        """Which build of the engine runs here ("" for an engine with one build)."""
        if self.build is None:
            return ""
        name: str = _attr(self.build)(model_cache)
        return name

    def unavailable_reason(self) -> str | None:
        if self.availability is None:
            return None
        reason: str | None = _attr(self.availability)()
        return reason


TORCH = EngineKind(
    name="torch",
    label="torch",
    native_gguf=False,
    torch_options=True,
    devices=DEVICE_TYPES,
    engine_class="samchat.engines.torch.engine:TorchEngine",
    context_limit=_hf_context,
    vocab_size=_hf_vocab,
    weights="samchat.engines.torch.loading:load_weights",
    option_checks="samchat.engines.torch.loading:check_options",
    prepare="samchat.engines.torch.loading:prepare",
    auto_device="samchat.engines.torch.placement:auto_device_type",
    # int4 / int8: weight-only formats on the CPU, packed from a GGUF's own blocks (quant.py).
    dtypes=("float32", "float16", "bfloat16", "int4", "int8", "int4-requantized"),
    # Packed int4/int8 weights run on the lean forward (lean_engine.py).
    opener="samchat.engines.torch.engine:open_engine",
    build="samchat.engines.flat.native:expected_forward",
)
LLAMACPP = EngineKind(
    name="llamacpp",
    label="llama.cpp",
    native_gguf=True,
    torch_options=False,
    devices=("cpu",),
    engine_class="samchat.engines.llamacpp.engine:LlamaCppEngine",
    context_limit=_gguf_context,
    vocab_size=_gguf_vocab,
    weights="samchat.engines.llamacpp.model:load_weights",
    availability="samchat.engines.llamacpp.model:unavailable_reason",
)
# The first is what runs anything the others cannot.
KINDS: tuple[EngineKind, ...] = (TORCH, LLAMACPP)
# (engine, dtype) pairs that run a GGUF file on the CPU, compared by `samchat bench engines`.
GGUF_CPU_CANDIDATES: tuple[tuple[str, str], ...] = ((LLAMACPP.name, AUTO), (TORCH.name, "int4"))
ENGINES: tuple[str, ...] = (AUTO, *(kind.name for kind in KINDS))
DEFAULT = KINDS[0]


def engine_kind(name: str) -> EngineKind:
    """The kind named `name` (not "auto": the loader resolves that); KeyError if none."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise KeyError(f"unknown engine {name!r}; use one of {', '.join(ENGINES)}")


def native_gguf_kind() -> EngineKind | None:
    """The engine `auto` prefers for GGUF models, where it can run."""
    return next((kind for kind in KINDS if kind.native_gguf), None)
