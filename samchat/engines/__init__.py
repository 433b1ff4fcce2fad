"""Engines: the few model operations the decoding loop needs (prefill with prefix reuse, one
forward over a draft tree, commit the accepted path, cost-curve measurement), behind one small
interface. `torch/` serves Hugging Face models on any torch device; `flat/` runs a GGUF's own
numbers on the CPU, every verification row as a one-token step; `llamacpp/` runs GGUF files
through llama.cpp; `registry` names them. ChatSession, the drafters, the policy and the
statistics never ask which one runs."""

from __future__ import annotations

from pathlib import Path

from samchat.engines.base import Engine, EngineModel, Logits
from samchat.engines.registry import ENGINES, engine_kind

__all__ = ["ENGINES", "Engine", "Logits", "open_engine"]


def open_engine(lm: EngineModel, cache_dir: Path | None = None) -> Engine:
    """A fresh engine (its own KV cache) over the loaded model's weights; it keeps what it
    measures on this machine under cache_dir (None: in this process only)."""
    return engine_kind(lm.engine).open(lm, cache_dir)
