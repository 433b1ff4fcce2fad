"""What the model loader hands an engine to load weights with, and what it gets back. The loader
(samchat.models) finds a model and reads its tokenizer; the engine, named by the registry, turns
the files into the weights it runs. Engines import nothing of the loader: they read these."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from samchat.names import StepMode

Say = Callable[[str], None]


class Device(Protocol):
    """Where weights run, as a torch.device reads (llama.cpp's weights say "cpu" instead)."""

    @property
    def type(self) -> str: ...


@dataclass(frozen=True)
class ModelFiles:
    """A model found here or on the hub: a directory (or a hub id to download) and, for a GGUF
    model, the file in that directory."""

    path: str
    gguf_file: str | None
    name: str
    local: bool  # False: a hub id, downloaded by the load

    @property
    def gguf(self) -> Path | None:
        return Path(self.path) / self.gguf_file if self.gguf_file else None

    @property
    def location(self) -> str:
        """The GGUF file, else the directory or hub id: what a load reads."""
        gguf = self.gguf
        return str(gguf) if gguf is not None else self.path


class WeightOptions(Protocol):
    """The options a load asks for (a samchat.models ModelSpec): engines that take none of
    them refuse them before loading (the registry's EngineKind.torch_options)."""

    @property
    def device(self) -> str: ...

    @property
    def dtype(self) -> str: ...

    @property
    def quantize(self) -> str | None: ...

    @property
    def trust_remote_code(self) -> bool: ...

    @property
    def cuda_graphs(self) -> bool | None: ...


@dataclass(frozen=True)
class WeightsRequest:
    files: ModelFiles
    options: WeightOptions
    # The model cache: where an engine keeps what it derives from a model file (converted or
    # packed copies); the loader resolves it, since engines know nothing of samchat's paths.
    cache_dir: Path
    # Where a GGUF model converted for an engine that does not run GGUF files is kept (None:
    # the model is no GGUF file).
    converted: Path | None
    # Writes the model's tokenizer into a folder (a converted copy carries its tokenizer):
    # the loader owns tokenizers, so the engine asks it.
    save_tokenizer: Callable[[Path], None]
    say: Say


@dataclass(frozen=True)
class Weights:
    """A model's weights as its engine runs them, and what the loader records of them."""

    model: object  # only its engine reads it (narrowed to the engine's own type there)
    device: Device | str
    dtype: str  # as messages and benchmarks name it: "float32", "int4", a GGUF file type
    steps: StepMode = "dynamic"  # how the torch engine runs its steps (TorchEngine's `steps`)
    # The end ids the weights' own configuration names (a Hugging Face model's generation
    # config), read beside the tokenizer's; a GGUF model's come from its metadata instead.
    eos_ids: tuple[int, ...] = ()


def quiet_transformers() -> None:
    """samchat reports its own progress; transformers' tqdm bars would garble the CLI and TUI."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
