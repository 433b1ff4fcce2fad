"""The prompt as token ids: the chat template rendered (as every session and the benchmarks'
baselines render it), and how much of it a cache or an automaton already holds."""

from __future__ import annotations

from collections.abc import Sequence

from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.tokenizer import Tokenizer


def render_prompt(tokenizer: Tokenizer, messages: list[Message]) -> list[int]:
    """Token ids of the chat template for messages, with the assistant prompt appended."""
    try:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception as exc:  # jinja errors: a template that rejects this conversation
        raise SamchatError(f"the chat template rejected the messages: {exc}") from exc
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens a and b share."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
