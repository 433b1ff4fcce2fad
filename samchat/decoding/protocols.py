"""What a ChatSession needs of the things it is given, as Protocols: the loaded model (a
samchat.models LoadedModel, or a test's stand-in) and its tokenizer, and the static index it
drafts from (a samchat.sam StaticIndex, or the corpus indexer's view of its flushed segments).
Decoding knows neither package that makes them (the import contracts), only these shapes. And
the Drafter interface every draft source (the automata, Token Recycling) offers the policy."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from samchat.decoding.tree import DraftTree
from samchat.engines.base import EngineModel, Logits
from samchat.names import DrafterName
from samchat.tokenizer import Tokenizer as Tokenizer  # re-exported: a session's tokenizer

if TYPE_CHECKING:
    from samchat.sam import MultiCursor


class SessionModel(EngineModel, Protocol):
    """A loaded model as the session, its engine and Token Recycling read it."""

    @property
    def tokenizer(self) -> Tokenizer: ...

    @property
    def eos_ids(self) -> Sequence[int]: ...


class DraftIndex(Protocol):
    """A static index to draft from: a fresh cursor per reply."""

    def cursor(self) -> MultiCursor: ...


class Drafter(ABC):
    """Proposes draft trees that continue the text and learns what the model accepted.

    Call order per reply: begin(prompt tokens), then per step match_len() / propose(n),
    then advance(committed tokens) (and observe(...) after every forward if wants_logits).
    """

    name: DrafterName  # each drafter sets its own
    wants_logits: bool = False

    @abstractmethod
    def begin(self, context: Sequence[int]) -> None:
        """A reply starts; context is the whole text so far (rendered prompt tokens)."""

    def match_len(self) -> int:
        """How long a suffix of the text this drafter matched (0 = it has nothing)."""
        return 0

    @abstractmethod
    def propose(self, max_nodes: int) -> DraftTree | None:
        """A draft of at most max_nodes nodes, or None."""

    @abstractmethod
    def advance(self, tokens: Sequence[int]) -> None:
        """Tokens committed to the text since the last call."""

    def observe(self, input_ids: Sequence[int], logits: Logits) -> None:  # noqa: B027
        """Every verification forward: input ids and their logits (n, vocab). Optional."""

    def feedback(self, accepted: int) -> None:  # noqa: B027
        """How many tokens of this drafter's last proposal the model accepted."""

    def finish(self) -> None:  # noqa: B027
        """The reply ended (a drafter may persist what it learned)."""

    def expected_accepted(self, max_nodes: int) -> float:
        """Tree drafters (Token Recycling): mean accepted tokens for a draft of this size."""
        return 0.0

    def potential(self, max_nodes: int) -> float:
        """Tree drafters: expected_accepted once the drafter has a candidate for the text's
        last token (what it may be worth, even before it has one)."""
        return self.expected_accepted(max_nodes)

    def tree_sizes(self) -> Sequence[int]:
        """Tree drafters: the draft sizes they can build (template sizes)."""
        return ()

    def allow_tree_sizes(self, sizes: Sequence[int]) -> None:  # noqa: B027
        """Tree drafters: build these sizes from now on (the policy's, from the cost curve)."""
