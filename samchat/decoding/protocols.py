"""What a ChatSession needs of the things it is given, as Protocols: the loaded model (a
samchat.models LoadedModel, or a test's stand-in) and the static index it drafts from (a
samchat.sam StaticIndex, or the corpus indexer's view of its flushed segments). Decoding knows
neither package that makes them (the import contracts), only these shapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from samchat.sam import MultiCursor


class SessionModel(Protocol):
    """A loaded model as the session, its engine and Token Recycling read it."""

    @property
    def tokenizer(self) -> Any: ...  # transformers' tokenizer, or samchat's kept one

    @property
    def eos_ids(self) -> Sequence[int]: ...

    @property
    def context_limit(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def name(self) -> str: ...

    @property
    def engine(self) -> str: ...  # the registry's name of the engine that runs it


class DraftIndex(Protocol):
    """A static index to draft from: a fresh cursor per reply."""

    def cursor(self) -> MultiCursor: ...
