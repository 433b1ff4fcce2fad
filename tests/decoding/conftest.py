"""The decoding tests' fixtures: the tiny random Llama's (tests/tiny.py)."""

from __future__ import annotations

from tests.tiny import one_thread, tiny_model

__all__ = ["one_thread", "tiny_model"]
