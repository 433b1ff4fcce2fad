"""What samchat reads of a tokenizer, as a Protocol: transformers' own, or the one it keeps in its
cache (samchat.models.tokenizer_cache.KeptTokenizer). Below every package that passes one
around (models, decoding, corpus), so each names the same shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from samchat.messages import Message


class Tokenizer(Protocol):
    chat_template: str | None  # the model's Jinja chat template (None: it has none)

    def __call__(
        self, text: str, add_special_tokens: bool = ..., verbose: bool = ...
    ) -> Mapping[str, list[int]]: ...  # {"input_ids": [...]} (transformers adds more)

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = ...,
        *,
        tokenize: Literal[False],  # samchat asks for the text (transformers' default is ids)
    ) -> str: ...

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def pad_token_id(self) -> int | None: ...

    @property
    def all_special_tokens(self) -> list[str]: ...

    def get_vocab(self) -> dict[str, int]: ...

    def save_pretrained(self, target: Path | str) -> object: ...  # what it wrote, unread
