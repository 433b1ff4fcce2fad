"""The torch engine's tests: the tiny random Llama's fixtures (tests/tiny.py)."""

from __future__ import annotations

from tests.tiny import one_thread, tiny_model

__all__ = ["one_thread", "tiny_model"]
