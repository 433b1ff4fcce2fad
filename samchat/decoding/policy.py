"""The drafting policy: how likely a draft is to be accepted (running rates per drafter and
match length), how long a draft pays on this machine's cost curve, the selector that picks
each step's draft (or a plain step) from the drafters' proposals, and the rules the session
follows around it: when a plain step recalibrates the one-token time, how often a resting
drafter still reads a forward, and how many prompt rows Token Recycling learns from."""

from __future__ import annotations

from dataclasses import dataclass

from samchat.decoding.drafter import Drafter
from samchat.decoding.params import DecodingConfig
from samchat.decoding.tree import DraftTree
from samchat.engines.cost import FLAT_COST, CostCurve

# Acceptance of SAM sequence drafts, by match-length bucket: prior per-token acceptance rate.
_BUCKET_EDGES = (1, 2, 3, 4, 5, 8, 16, 32)
_PRIOR_RATE = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85)
_PRIOR_WEIGHT = 4.0


def bucket(match_len: int) -> int:
    b = 0
    for edge in _BUCKET_EDGES:
        if match_len >= edge:
            b += 1
        else:
            break
    return b


# A bucket the selector passes over loses this share of its evidence each time, so a rate that
# fell below paying drifts back toward the prior and gets tried again (nothing else would ever
# update it).
_SKIP_DECAY = 0.97
# Each reply keeps this share of the evidence before it: acceptance follows the text, and
# rates learned on one kind of text (extraction, translation) made long drafts fail on the next
# (summarization, math reasoning), which the fade repaired (docs/benchmarks.md).
REPLY_FADE = 0.5
# The key suffix of a reply's first step (see drafter.Decision.key). That step comes once per
# reply, so the reply fade would keep its evidence near two observations and its prior would
# never be outweighed: it keeps all of it (first-step drafts were accepted far less often than
# the faded rates predicted, docs/benchmarks.md).
REPLY_START = "@start"


class AcceptanceModel:
    """Running per-token acceptance rates of sequence drafts, per drafter key and match bucket.

    A sequence draft is modelled as geometric: each next token is accepted with rate a, so
    a draft of n tokens adds sum(a^i, i=1..n) tokens on average. The maximum-likelihood a from
    observed steps is accepted / (accepted + rejections), smoothed by a prior. Evidence fades
    while a bucket is skipped (`skipped`), so no bucket is written off for good.
    """

    def __init__(self) -> None:
        self._acc: dict[str, list[float]] = {}  # observed, without the prior
        self._rej: dict[str, list[float]] = {}
        self._skips: dict[str, list[int]] = {}

    def _rows(self, drafter: str) -> tuple[list[float], list[float], list[int]]:
        if drafter not in self._acc:
            n = len(_PRIOR_RATE)
            self._acc[drafter] = [0.0] * n
            self._rej[drafter] = [0.0] * n
            self._skips[drafter] = [0] * n
        return self._acc[drafter], self._rej[drafter], self._skips[drafter]

    def rate(self, drafter: str, match_len: int) -> float:
        acc, rej, skips = self._rows(drafter)
        b = bucket(match_len)
        w = _SKIP_DECAY ** skips[b]
        prior = _PRIOR_RATE[b]
        total = _PRIOR_WEIGHT + w * (acc[b] + rej[b])
        return (prior * _PRIOR_WEIGHT + w * acc[b]) / total

    def skipped(self, drafter: str, match_len: int) -> None:
        """The selector had this bucket's match and did not draft from it."""
        self._rows(drafter)[2][bucket(match_len)] += 1

    def fade(self, factor: float) -> None:
        """Scale the evidence by factor (a new text: what was learned elsewhere counts less),
        but that of reply starts (REPLY_START)."""
        for key in self._acc:
            if key.endswith(REPLY_START):
                continue
            for rows in (self._acc[key], self._rej[key]):
                for b, v in enumerate(rows):
                    rows[b] = v * factor

    def update(self, drafter: str, match_len: int, draft_len: int, accepted: int) -> None:
        acc, rej, skips = self._rows(drafter)
        b = bucket(match_len)
        if skips[b]:
            w = _SKIP_DECAY ** skips[b]
            acc[b] *= w
            rej[b] *= w
            skips[b] = 0
        acc[b] += accepted
        if accepted < draft_len:
            rej[b] += 1.0


def expected_sequence(rate: float, n: int) -> float:
    """Expected accepted tokens of an n-token sequence draft: sum(rate^i, i = 1..n)."""
    total, p = 0.0, 1.0
    for _ in range(n):
        p *= rate
        total += p
    return total


def best_sequence_length(rate: float, cap: int, curve: CostCurve) -> tuple[int, float]:
    """Draft length n <= cap maximising (1 + expected accepted) / cost(n + 1), and that value
    (1.0 means a plain step is as good; n = 0 means draft nothing)."""
    best_n, best_v = 0, 1.0
    expected = 0.0
    p = 1.0
    for n in range(1, cap + 1):
        p *= rate
        expected += p
        v = (1.0 + expected) / curve.rel(n + 1)
        if v > best_v:
            best_n, best_v = n, v
        if p < 1e-3:
            break
    return best_n, best_v


@dataclass
class Decision:
    drafter: str  # "dyn" | "static" | "tr" | "plain"; a merged tree: "dyn+tr" | "static+tr"
    match_len: int
    size: int  # nodes asked for
    # The acceptance-model key of the SAM part: the drafter, or "<drafter>@start" for the
    # reply's first step, where the match is the chat template's header (a weak signal
    # that would otherwise drag down the short-match buckets).
    key: str = ""
    sam_size: int = 0  # nodes of a merged tree that came from the SAM draft


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
        self.at_start = False  # the next choice is a reply's first step

    @property
    def cap(self) -> int:
        """The largest draft: max_draft, or where the (possibly refreshed) curve says longer
        drafts stop paying."""
        if self.config.max_draft:
            return self.config.max_draft
        curve = self.curve
        return min(curve.max_inputs - 1, 32 if curve.rel(33) > FLAT_COST else 63)

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
        cost (1.0 = a plain step): the SAM sequence, a Token Recycling tree, or both merged
        into one tree where the curve is flat enough that verifying both pays."""
        key = ""
        sam_n, sam_v, sam_e = 0, 1.0, 0.0
        if sam is not None and ml > 0:
            key = sam.name + (REPLY_START if self.at_start else "")
            cap = min(budget, 1 + self.config.alpha * ml)
            rate = self.acceptance.rate(key, ml)
            sam_n, sam_v = best_sequence_length(rate, cap, self.curve)
            sam_e = expected_sequence(rate, sam_n)
        aux = self.aux if self.trees_allowed else None
        aux_n, aux_v = self._aux_size(aux, budget) if aux is not None else (0, 1.0)
        merged_n, merged_v = 0, 1.0
        if aux is not None and sam_n > 0:
            merged_n, merged_v = self._merged_size(aux, sam_n, sam_e, budget)
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
        return tree, Decision(sam.name, ml, len(tree), key, len(tree))

    def _propose_merged(
        self, sam: Drafter, aux: Drafter, sam_n: int, aux_n: int, ml: int, key: str
    ) -> tuple[DraftTree, Decision] | None:
        first = sam.propose(sam_n)
        if first is None or not first.tokens:
            return None
        second = aux.propose(aux_n)
        if second is None or not second.tokens:
            return first, Decision(sam.name, ml, len(first), key, len(first))
        tree = DraftTree.merge(first, second)
        return tree, Decision(tree.source, ml, len(tree), key, len(first))

    def _merged_size(
        self, aux: Drafter, sam_n: int, sam_e: float, budget: int
    ) -> tuple[int, float]:
        """The Token Recycling tree size that best joins an sam_n-token SAM draft, and the
        value of the merged tree."""
        best, best_v = 0, 1.0
        for s in aux.tree_sizes():
            if sam_n + s > budget:
                continue
            aux_e = aux.expected_accepted(s)
            expected = max(sam_e, aux_e) + _MERGE_CREDIT * min(sam_e, aux_e)
            v = (1.0 + expected) / self.curve.rel(sam_n + s + 1)
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
        return any(
            (1.0 + aux.potential(s)) / self.curve.rel(s + 1) > 1.0
            for s in aux.tree_sizes()
            if s <= cap
        )

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
            sam = decision.drafter.split("+")[0]
            run = 0
            while run < len(accepted) and accepted[run] == sam:
                run += 1
            self.acceptance.update(decision.key, decision.match_len, decision.sam_size, run)
        elif self.aux is not None and decision.drafter == self.aux.name:
            self.aux.feedback(len(accepted))


# A plain step is forced when none ran for this many steps (replies included), so the one-token
# time (the cost curve's unit and speedup_est's baseline) follows the machine's current load.
CALIBRATE_EVERY = 64
# A drafter that rests (no draft of it can pay on this curve) still reads one forward in this
# many, so its acceptance rates follow the text and it wakes up where they make it pay.
REST_SAMPLE = 16


def calibration_due(curve: CostCurve, since_plain: int) -> bool:
    """A plain step is due: none ran for CALIBRATE_EVERY steps, and the curve is one decoding
    refines (a fixed curve needs no fresh one-token time)."""
    return not curve.fixed and since_plain >= CALIBRATE_EVERY


# Token Recycling also learns from the last new prompt rows of each turn (as SAM-D does from all
# of them): their logits cost one output projection per row at prefill.
PROMPT_ROWS = 64
# Where verifying 64 rows costs at most FLAT_COST one-row forwards (a GPU, a flat curve), the
# projection is cheap too: learn from every new row of the last prefill chunk, up to
# PROMPT_LOGITS logits in all (memory). On a flat curve this raised the acceptance of
# summaries and document answers and lowered no category.
PROMPT_LOGITS = 1 << 27


def prompt_rows(rel_cost_64: float, vocab_size: int) -> int:
    """How many new prompt rows Token Recycling learns from, given 64 rows' cost relative to
    one."""
    if rel_cost_64 <= FLAT_COST:
        return max(PROMPT_ROWS, PROMPT_LOGITS // max(vocab_size, 1))
    return PROMPT_ROWS
