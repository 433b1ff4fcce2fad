"""The drafter interface and the selection step that picks one draft per verification step."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from samchat.decoding.budget import AcceptanceModel, CostCurve, best_sequence_length
from samchat.decoding.params import DecodingConfig
from samchat.decoding.tree import DraftTree


class Drafter(ABC):
    """Proposes draft trees that continue the text and learns what the model accepted.

    Call order per reply: begin(prompt tokens), then per step match_len() / propose(n),
    then advance(committed tokens) (and observe(...) after every forward if wants_logits).
    """

    name: str = ""
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

    def observe(self, input_ids: Sequence[int], logits: Any) -> None:  # noqa: B027
        """Every verification forward: input ids and their logits (n, vocab). Optional."""

    def feedback(self, accepted: int) -> None:  # noqa: B027
        """How many tokens of this drafter's last proposal the model accepted."""

    def finish(self) -> None:  # noqa: B027
        """The reply ended (a drafter may persist what it learned)."""

    def expected_accepted(self, max_nodes: int) -> float:
        """Tree drafters (Token Recycling): mean accepted tokens for a draft of this size."""
        return 0.0

    def tree_sizes(self) -> Sequence[int]:
        """Tree drafters: the draft sizes they can build (template sizes)."""
        return ()


@dataclass
class Decision:
    drafter: str  # "dyn" | "static" | "tr" | "plain"
    match_len: int
    size: int  # nodes asked for


PLAIN = Decision("plain", 0, 0)


class Selector:
    """Picks each step's draft.

    The SAM candidate is the dynamic SAM when dyn >= static - l_bias, else the static one.
    Without `adaptive`: SAM-Decoding's rule. The SAM draft (length min(max, 1 + alpha * match))
    when max(dyn, static - l_bias) >= l_threshold, else the auxiliary tree drafter (Token
    Recycling), else a plain step. With `adaptive` (default): the source and size that maximise
    expected committed tokens per unit of forward cost on this hardware (measured cost curve,
    running acceptance rates per drafter and match length); a plain step when no draft pays."""

    def __init__(
        self,
        config: DecodingConfig,
        curve: CostCurve,
        acceptance: AcceptanceModel,
        dyn: Drafter | None = None,
        static: Drafter | None = None,
        aux: Drafter | None = None,
    ) -> None:
        self.config = config
        self.curve = curve
        self.acceptance = acceptance
        self.dyn = dyn
        self.static = static
        self.aux = aux
        self.trees_allowed = True  # False: the model takes no 4D mask, sequence drafts only
        if config.max_draft:
            self.cap = config.max_draft
        else:  # fitted: the curve says where longer drafts stop paying
            self.cap = min(curve.max_inputs - 1, 32 if curve.rel(33) > 1.5 else 63)

    def choose(self, budget: int) -> tuple[DraftTree | None, Decision]:
        """One draft of at most `budget` nodes (or None for a plain step)."""
        budget = min(budget, self.cap)
        if budget <= 0:
            return None, PLAIN
        cfg = self.config
        dl = self.dyn.match_len() if self.dyn is not None else 0
        sl = self.static.match_len() if self.static is not None else 0
        if self.dyn is not None and dl >= sl - cfg.l_bias:
            sam, ml = self.dyn, dl
        elif self.static is not None:
            sam, ml = self.static, sl
        else:
            sam, ml = None, 0
        if cfg.adaptive:
            return self._best_value(sam, ml, budget)
        strong = max(dl, sl - cfg.l_bias) >= cfg.l_threshold
        if sam is not None and ml > 0 and strong:
            tree, decision = self._sam_draft(sam, ml, budget)
            if tree is not None:
                return tree, decision
        if self.aux is not None:
            return self._aux_draft(self.aux, budget)
        return None, PLAIN

    def _best_value(
        self, sam: Drafter | None, ml: int, budget: int
    ) -> tuple[DraftTree | None, Decision]:
        """The source and size with the most expected committed tokens per unit of forward
        cost (1.0 = a plain step)."""
        sam_n, sam_v = 0, 1.0
        if sam is not None and ml > 0:
            cap = min(budget, 1 + self.config.alpha * ml)
            sam_n, sam_v = best_sequence_length(self.acceptance.rate(sam.name, ml), cap, self.curve)
        aux_n, aux_v = 0, 1.0
        if self.aux is not None and self.trees_allowed:
            aux_n, aux_v = self._aux_size(self.aux, budget)
        order = sorted(((sam_v, 0), (aux_v, 1)), reverse=True)
        for value, which in order:
            if value <= 1.0:
                break
            if which == 0 and sam is not None:
                tree = sam.propose(sam_n)
                if tree is not None and not self.trees_allowed:
                    tree = tree.first_path()
                if tree is not None and tree.tokens:
                    return tree, Decision(sam.name, ml, len(tree))
            elif which == 1 and self.aux is not None:
                tree = self.aux.propose(aux_n)
                if tree is not None and tree.tokens:
                    return tree, Decision(self.aux.name, 0, len(tree))
        return None, PLAIN

    def _aux_size(self, aux: Drafter, budget: int) -> tuple[int, float]:
        best, best_v = 0, 1.0
        for s in aux.tree_sizes():
            if s > budget:
                continue
            v = (1.0 + aux.expected_accepted(s)) / self.curve.rel(s + 1)
            if v > best_v:
                best, best_v = s, v
        return best, best_v

    def _sam_draft(self, sam: Drafter, ml: int, budget: int) -> tuple[DraftTree | None, Decision]:
        tree = sam.propose(min(budget, 1 + self.config.alpha * ml))
        if tree is not None and not self.trees_allowed:
            tree = tree.first_path()
        if tree is None or not tree.tokens:
            return None, PLAIN
        return tree, Decision(sam.name, ml, len(tree))

    def _aux_draft(self, aux: Drafter, budget: int) -> tuple[DraftTree | None, Decision]:
        if not self.trees_allowed:
            return None, PLAIN
        sizes = [s for s in aux.tree_sizes() if s <= budget] or [budget]
        tree = aux.propose(max(sizes))
        if tree is None or not tree.tokens:
            return None, PLAIN
        return tree, Decision(aux.name, 0, len(tree))

    def feedback(self, decision: Decision, accepted: int) -> None:
        if decision.drafter in ("dyn", "static") and decision.size > 0:
            self.acceptance.update(decision.drafter, decision.match_len, decision.size, accepted)
        elif self.aux is not None and decision.drafter == self.aux.name:
            self.aux.feedback(accepted)
