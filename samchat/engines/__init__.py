"""Engines: the few model operations the decoding loop needs (prefill with prefix reuse, one
forward over a draft tree, commit the accepted path, cost-curve measurement), behind one small
interface. `torch_engine` serves Hugging Face models on any torch device; `llamacpp` runs GGUF
files through llama.cpp. ChatSession, the drafters, the selector and the statistics never ask
which one runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from samchat.engines.base import ENGINES, Engine, Logits

__all__ = ["ENGINES", "Engine", "Logits", "open_engine"]


def open_engine(lm: Any, cache_dir: Path | None = None) -> Engine:
    """A fresh engine (its own KV cache) over the loaded model's weights; it keeps what it
    measures on this machine under cache_dir (None: in this process only)."""
    if getattr(lm, "engine", "torch") == "llamacpp":
        from samchat.engines.llamacpp.engine import LlamaCppEngine

        return LlamaCppEngine(lm, cache_dir=cache_dir)
    from samchat.engines.torch.engine import TorchEngine

    return TorchEngine(lm, cache_dir)
