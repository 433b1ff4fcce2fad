"""The selector: each step's draft (or a plain step) from the drafters' proposals, sized on this
machine's cost curve by the acceptance model, within the draft-row ceiling."""

from __future__ import annotations

from dataclasses import dataclass

from samchat.decoding.params import DecodingConfig
from samchat.decoding.policy.acceptance import (
    REPLY_START,
    AcceptanceModel,
    best_sequence_length,
    expected_sequence,
)
from samchat.decoding.policy.hostcost import HostCosts, Prices
from samchat.decoding.protocols import Drafter
from samchat.decoding.tree import DraftTree
from samchat.engines.base import DRAFT_ROWS
from samchat.engines.costs import FLAT_COST, CostCurve
from samchat.names import DrafterName, DraftSource, merged_source

# The largest draft: a forward's rows less the pending token's.
MAX_DRAFT = DRAFT_ROWS - 1
# Where verifying more than this many nodes costs more than FLAT_COST one-row forwards (a CPU),
# drafts stop here: the longest run a sequence draft is accepted for rarely fills more.
STEEP_MAX_DRAFT = 32


@dataclass
class Decision:
    drafter: DraftSource
    match_len: int
    size: int  # nodes asked for
    # The acceptance-model key of the SAM part: the drafter, or "<drafter>@start" for the
    # reply's first step, where the match is the chat template's header (a weak signal
    # that would otherwise drag down the short-match buckets).
    key: str = ""
    sam_size: int = 0  # nodes of a merged tree that came from the SAM draft
    sam: DrafterName | None = None  # the drafter of those nodes (set where sam_size is)


PLAIN = Decision("plain", 0, 0)
# A merged tree is credited with its better part's expected tokens and this share of the
# other's: both parts' first tokens are often the same guess.
_MERGE_CREDIT = 0.25


class Selector:
    """Picks each step's draft.

    The SAM candidate is the dynamic SAM when dyn >= static - l_bias, else the static one.
    Without `adaptive`: SAM-Decoding's rule. The SAM draft (length min(max, 1 + alpha * match))
    when max(dyn, static - l_bias) >= l_threshold, else the auxiliary tree drafter (Token
    Recycling), else a plain step. With `adaptive` (default): the source and size that maximise
    expected committed tokens per unit of forward cost on this hardware (measured cost curve,
    running acceptance rates per drafter and match length, the host's time per step of each
    kind: policy/hostcost.py); a plain step when no draft pays."""

    def __init__(
        self,
        config: DecodingConfig,
        curve: CostCurve,
        acceptance: AcceptanceModel,
        dynamic: Drafter | None = None,
        static: Drafter | None = None,
        aux: Drafter | None = None,
    ) -> None:
        self.config = config
        self.curve = curve
        self.acceptance = acceptance
        self.dynamic = dynamic
        self.static = static
        self.aux = aux
        self.trees_allowed = True  # False: the model takes no 4D mask, sequence drafts only
        self.at_start = False  # the next choice is a reply's first step
        self.host: HostCosts | None = None  # the host's time per step, priced beside the curve

    def prices(self, kind: DraftSource) -> Prices:
        """What a step of `kind` costs by its inputs, in plain steps: the curve, plus the host's
        time where it is tracked (`adaptive` only: SAM-Decoding's rule prices nothing)."""
        if self.host is None or not self.config.adaptive:
            return self.curve
        return self.host.priced(kind, self.curve)

    @property
    def cap(self) -> int:
        """The largest draft: max_draft, or where the (possibly refreshed) curve says longer
        drafts stop paying."""
        if self.config.max_draft:
            return self.config.max_draft
        curve = self.curve
        steep = curve.rel(STEEP_MAX_DRAFT + 1) > FLAT_COST
        return min(curve.max_inputs - 1, STEEP_MAX_DRAFT if steep else MAX_DRAFT)

    def choose(self, budget: int) -> tuple[DraftTree | None, Decision]:
        """One draft of at most `budget` nodes (or None for a plain step)."""
        budget = min(budget, self.cap)
        if budget <= 0:
            return None, PLAIN
        cfg = self.config
        dl = self.dynamic.match_len() if self.dynamic is not None else 0
        sl = self.static.match_len() if self.static is not None else 0
        if self.dynamic is not None and dl >= sl - cfg.l_bias:
            sam, ml = self.dynamic, dl
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
        cost (1.0 = a plain step): the SAM sequence, a Token Recycling tree, or both merged
        into one tree where the curve is flat enough that verifying both pays."""
        key = ""
        sam_n, sam_v, sam_e = 0, 1.0, 0.0
        if sam is not None and ml > 0:
            key = sam.name + (REPLY_START if self.at_start else "")
            cap = min(budget, 1 + self.config.alpha * ml)
            rate = self.acceptance.rate(key, ml)
            sam_n, sam_v = best_sequence_length(rate, cap, self.prices(sam.name))
            sam_e = expected_sequence(rate, sam_n)
        aux = self.aux if self.trees_allowed else None
        aux_n, aux_v = self._aux_size(aux, budget) if aux is not None else (0, 1.0)
        merged_n, merged_v = 0, 1.0
        if aux is not None and sam is not None and sam_n > 0:
            prices = self.prices(merged_source(sam.name))
            merged_n, merged_v = self._merged_size(aux, sam_n, sam_e, budget, prices)
        options = sorted(((sam_v, 0), (aux_v, 1), (merged_v, 2)), reverse=True)
        chosen = None
        for value, which in options:
            if value <= 1.0:
                break
            if which == 0 and sam is not None:
                chosen = self._propose_sam(sam, sam_n, ml, key)
            elif which == 1 and aux is not None:
                tree = aux.propose(aux_n)
                if tree is not None and tree.tokens:
                    chosen = tree, Decision(aux.name, 0, len(tree))
            elif which == 2 and sam is not None and aux is not None:
                chosen = self._propose_merged(sam, aux, sam_n, merged_n, ml, key)
            if chosen is not None:
                break
        if key and (chosen is None or chosen[1].sam_size == 0):
            self.acceptance.skipped(key, ml)
        return chosen if chosen is not None else (None, PLAIN)

    def _propose_sam(
        self, sam: Drafter, n: int, ml: int, key: str
    ) -> tuple[DraftTree, Decision] | None:
        tree = sam.propose(n)
        if tree is not None and not self.trees_allowed:
            tree = tree.first_path()
        if tree is None or not tree.tokens:
            return None
        return tree, Decision(sam.name, ml, len(tree), key, len(tree), sam.name)

    def _propose_merged(
        self, sam: Drafter, aux: Drafter, sam_n: int, aux_n: int, ml: int, key: str
    ) -> tuple[DraftTree, Decision] | None:
        first = sam.propose(sam_n)
        if first is None or not first.tokens:
            return None
        second = aux.propose(aux_n)
        if second is None or not second.tokens:
            return first, Decision(sam.name, ml, len(first), key, len(first), sam.name)
        tree = DraftTree.merge(first, second)
        return tree, Decision(tree.source, ml, len(tree), key, len(first), sam.name)

    def _merged_size(
        self, aux: Drafter, sam_n: int, sam_e: float, budget: int, prices: Prices
    ) -> tuple[int, float]:
        """The Token Recycling tree size that best joins an sam_n-token SAM draft, and the
        value of the merged tree."""
        best, best_v = 0, 1.0
        for s in aux.tree_sizes():
            if sam_n + s > budget:
                continue
            aux_e = aux.expected_accepted(s)
            expected = max(sam_e, aux_e) + _MERGE_CREDIT * min(sam_e, aux_e)
            v = (1.0 + expected) / prices.rel(sam_n + s + 1)
            if v > best_v:
                best, best_v = s, v
        return best, best_v

    def tree_can_pay(self, aux: Drafter) -> bool:
        """Whether some tree of `aux` is worth more than its forward costs on this curve, at
        the drafter's current acceptance rates. On a steep curve (llama.cpp on a small CPU, where 2
        rows cost nearly twice one) none is, and the drafter rests: its bookkeeping would only slow
        the steps that draft nothing. SAM-Decoding's rule (not `adaptive`) drafts with it
        whatever it costs. Where trees cannot be verified it can never draft."""
        if not self.trees_allowed:
            return False
        if not self.config.adaptive:
            return True
        cap = self.cap
        prices = self.prices(aux.name)
        return any(
            (1.0 + aux.potential(s)) / prices.rel(s + 1) > 1.0 for s in aux.tree_sizes() if s <= cap
        )

    def _aux_size(self, aux: Drafter, budget: int) -> tuple[int, float]:
        best, best_v = 0, 1.0
        prices = self.prices(aux.name)
        for s in aux.tree_sizes():
            if s > budget:
                continue
            v = (1.0 + aux.expected_accepted(s)) / prices.rel(s + 1)
            if v > best_v:
                best, best_v = s, v
        return best, best_v

    def _sam_draft(self, sam: Drafter, ml: int, budget: int) -> tuple[DraftTree | None, Decision]:
        chosen = self._propose_sam(sam, min(budget, 1 + self.config.alpha * ml), ml, sam.name)
        return chosen if chosen is not None else (None, PLAIN)

    def _aux_draft(self, aux: Drafter, budget: int) -> tuple[DraftTree | None, Decision]:
        if not self.trees_allowed:
            return None, PLAIN
        sizes = [s for s in aux.tree_sizes() if s <= budget] or [budget]
        tree = aux.propose(max(sizes))
        if tree is None or not tree.tokens:
            return None, PLAIN
        return tree, Decision(aux.name, 0, len(tree))

    def feedback(self, decision: Decision, accepted: list[str]) -> None:
        """After a step: the drafters of the accepted draft tokens, in path order."""
        if decision.sam_size > 0:
            # The SAM part is a sequence: its tokens accepted are the leading run of its nodes.
            sam = decision.sam
            run = 0
            while run < len(accepted) and accepted[run] == sam:
                run += 1
            self.acceptance.update(decision.key, decision.match_len, decision.sam_size, run)
        elif self.aux is not None and decision.drafter == self.aux.name:
            self.aux.feedback(len(accepted))
