"""What a ChatSession needs of the things it is given, as Protocols: the loaded model (a
samchat.models LoadedModel, or a test's stand-in) and its tokenizer, and the static index it
drafts from (a samchat.sam StaticIndex, or the corpus indexer's view of its flushed segments).
Decoding knows neither package that makes them (the import contracts), only these shapes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from samchat.engines.base import EngineModel

if TYPE_CHECKING:
    from samchat.messages import Message
    from samchat.sam import MultiCursor


class Tokenizer(Protocol):
    """What samchat reads of a tokenizer: transformers' or its own kept one
    (samchat.models.kept_tokenizer)."""

    def __call__(self, text: str, add_special_tokens: bool = ...) -> Mapping[str, Any]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = ...,
        tokenize: bool = ...,
    ) -> Any: ...  # the rendered text (tokenize=False, as samchat asks)


class SessionModel(EngineModel, Protocol):
    """A loaded model as the session, its engine and Token Recycling read it."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def eos_ids(self) -> Sequence[int]: ...


class DraftIndex(Protocol):
    """A static index to draft from: a fresh cursor per reply."""

    def cursor(self) -> MultiCursor: ...
