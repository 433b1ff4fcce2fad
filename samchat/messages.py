"""A chat message as chat templates and the OpenAI API take it: {"role": ..., "content": ...}."""

from __future__ import annotations

Message = dict[str, str]
