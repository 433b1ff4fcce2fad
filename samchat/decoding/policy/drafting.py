"""The rules a session follows around the selector, and one reply's drafting (`Drafting`).

- Each reply is new text: what earlier replies taught counts REPLY_FADE (`begin_reply`).
- A plain step now and then keeps the one-token time current (`calibration_due`).
- A draft stays below the rows an engine computes as one-token decoding does (`draft_budget`).
- A drafter none of whose trees can pay on the curve rests, reading one forward in REST_SAMPLE.
- A model that rejects a tree mask gets sequence drafts from then on (`Drafting.trees_failed`).
- Token Recycling builds the tree sizes the curve allows (`tree_sizes`), within the draft budget.
- Token Recycling learns from the last PROMPT_ROWS new prompt rows, or more on a flat curve.
- Each step's engine seconds refine the curve, its host seconds the host's price (`timed`)."""

from __future__ import annotations

from samchat.decoding.params import DecodingConfig
from samchat.decoding.policy.acceptance import REPLY_FADE, AcceptanceModel
from samchat.decoding.policy.hostcost import HostCosts
from samchat.decoding.policy.recycling import tree_sizes
from samchat.decoding.policy.selector import PLAIN, Decision, Selector
from samchat.decoding.protocols import Drafter
from samchat.decoding.tree import DraftTree
from samchat.engines.base import DRAFT_ROWS, Logits
from samchat.engines.costs import FLAT_COST, CostCurve, CostTracker
from samchat.names import DraftSource

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
# Where verifying DRAFT_ROWS rows costs at most FLAT_COST one-row forwards (a flat curve), the
# projection is cheap too: learn from every new row of the last prefill chunk, up to
# PROMPT_LOGITS logits in all (memory). On a flat curve this raised the acceptance of
# summaries and document answers and lowered no category.
PROMPT_LOGITS = 1 << 27


def prompt_rows(rel_cost_full: float, vocab_size: int) -> int:
    """How many new prompt rows Token Recycling learns from, given DRAFT_ROWS rows' cost
    relative to one."""
    if rel_cost_full <= FLAT_COST:
        return max(PROMPT_ROWS, PROMPT_LOGITS // max(vocab_size, 1))
    return PROMPT_ROWS


def begin_reply(acceptance: AcceptanceModel) -> None:
    """A reply starts: it is new text, so what earlier replies taught counts REPLY_FADE."""
    acceptance.fade(REPLY_FADE)


def draft_budget(room: int, exact_rows: int) -> int:
    """The most nodes a step may draft: what the reply has room for, and fewer than the rows
    whose logits the engine computes as one-token decoding does (the pending token is one)."""
    return min(room, exact_rows - 1)


def allowed_tree_sizes(selector: Selector, exact_rows: int) -> tuple[int, ...]:
    """The tree sizes the selector's curve allows within the draft budget (SAM-Decoding's rule,
    not `adaptive`, drafts whatever it costs: the sizes of a free verification)."""
    curve = selector.curve if selector.config.adaptive else CostCurve.flat()
    return tree_sizes(curve, draft_budget(selector.cap, exact_rows))


class Drafting:
    """The drafters of one reply and the selector that picks each step's draft. A resting
    drafter is not offered to the selector and reads only one forward in REST_SAMPLE."""

    __slots__ = (
        "drafters",
        "exact_rows",
        "host",
        "resting",
        "selector",
        "since_sample",
        "tracker",
        "trees",
        "watchers",
    )

    def __init__(
        self,
        drafters: list[Drafter],
        selector: Selector,
        tracker: CostTracker,
        resting: Drafter | None = None,
        trees: Drafter | None = None,
        exact_rows: int = DRAFT_ROWS,
    ) -> None:
        self.drafters = drafters
        self.host = selector.host if selector.host is not None else HostCosts()
        self.resting = resting
        self.watchers = [d for d in drafters if d.wants_logits and d is not resting]
        self.selector = selector
        self.tracker = tracker
        self.since_sample = 0
        self.trees = trees  # the tree drafter (Token Recycling), active or resting
        self.exact_rows = exact_rows

    @classmethod
    def plan(
        cls,
        config: DecodingConfig,
        tracker: CostTracker,
        acceptance: AcceptanceModel,
        drafters: tuple[Drafter | None, Drafter | None, Drafter | None],
        trees_allowed: bool,
        exact_rows: int,
        host: HostCosts | None = None,
    ) -> Drafting:
        """A reply's drafting with the (dynamic SAM, static SAM, Token Recycling) `drafters`,
        priced on the tracker's curve and the `host` time of each kind of step, on an engine
        whose first `exact_rows` rows equal one-token decoding. Token Recycling gets the tree
        sizes the curve allows, and rests when none of them can pay (or trees cannot be
        verified here)."""
        dynamic, static, aux = drafters
        selector = Selector(config, tracker.curve, acceptance, dynamic, static, aux)
        selector.host = host
        selector.trees_allowed = trees_allowed
        selector.at_start = True
        resting = None
        if aux is not None:
            aux.allow_tree_sizes(allowed_tree_sizes(selector, exact_rows))
            if not selector.tree_can_pay(aux):
                resting, selector.aux = aux, None
        active = [d for d in drafters if d is not None]
        return cls(active, selector, tracker, resting, aux, exact_rows)

    def begin(self, prompt: list[int], prompt_rows: tuple[list[int], Logits] | None) -> None:
        """The reply starts: every drafter sees the prompt; the active ones that read logits
        learn from the prompt rows the prefill returned."""
        for d in self.drafters:
            d.begin(prompt)
        if prompt_rows is not None:
            for d in self.watchers:
                d.observe(*prompt_rows)

    def prompt_logit_rows(self, vocab_size: int) -> int:
        """How many new prompt rows Token Recycling learns from (none where it rests)."""
        if self.selector.aux is None:
            return 0
        return prompt_rows(self.tracker.curve.rel(DRAFT_ROWS), vocab_size)

    def choose(
        self, room: int, exact_rows: int, since_plain: int
    ) -> tuple[DraftTree | None, Decision]:
        """This step's draft: none where the reply has no room or a plain step is due, else the
        selector's within `draft_budget`."""
        if room <= 0 or calibration_due(self.tracker.curve, since_plain):
            return None, PLAIN
        chosen = self.selector.choose(draft_budget(room, exact_rows))
        self.selector.at_start = False
        return chosen

    def trees_failed(self) -> None:
        """The model rejected a tree mask: sequence drafts only from now on."""
        self.selector.trees_allowed = False

    def learn(
        self,
        decision: Decision,
        ids: list[int],
        logits: Logits,
        new: list[int],
        accepted: list[str],
    ) -> None:
        """After a verified step: the drafters of the accepted draft tokens, the tokens
        committed (bonus included) and, for the drafters that want them, the logits."""
        selector = self.selector
        selector.feedback(decision, accepted)
        for d in self.drafters:
            d.advance(new)
        for d in self.watchers:
            d.observe(ids, logits)
        if self.resting is not None:
            self.since_sample += 1
            if self.since_sample >= REST_SAMPLE:
                self.since_sample = 0
                self.resting.observe(ids, logits)

    def timed(self, kind: DraftSource, n_inputs: int, host_s: float, engine_s: float) -> None:
        """A step of `kind` and `n_inputs` rows took `engine_s` in the engine's forward (which
        refines the curve) and `host_s` on the host (which prices that kind of step)."""
        tracker = self.tracker
        rel = tracker.curve.rel(n_inputs)
        if tracker.record(n_inputs, engine_s):
            selector = self.selector
            selector.curve = tracker.curve
            if self.trees is not None:  # its sizes follow the refitted curve
                self.trees.allow_tree_sizes(allowed_tree_sizes(selector, self.exact_rows))
        self.host.record(kind, n_inputs, host_s, engine_s, rel)

    def finish(self) -> None:
        for d in self.drafters:
            d.finish()
