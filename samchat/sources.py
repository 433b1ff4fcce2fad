"""How a model's source says where the model lives: `openai:...` on an OpenAI-compatible server
(samchat.remote reads the rest), anything else here (samchat.models finds it). Below both, so
that neither imports the other to tell them apart."""

from __future__ import annotations

REMOTE_PREFIX = "openai:"


def is_remote(source: str | None) -> bool:
    return bool(source) and str(source).startswith(REMOTE_PREFIX)
