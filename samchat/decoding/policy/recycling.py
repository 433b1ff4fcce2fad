"""Token Recycling's numbers (samchat/decoding/token_recycling.py runs them): its table's width, the
tree sizes a cost curve allows it and their depth, the priors of its rank rates, and how it
tracks its own accuracy."""

from __future__ import annotations

from samchat.decoding.policy.selector import MAX_DRAFT
from samchat.engines.costs import SIZES as MEASURED_ROWS
from samchat.engines.costs import CostCurve

K = 8  # next-token candidates kept per token
MAX_DEPTH = 6


def tree_sizes(curve: CostCurve, ceiling: int = MAX_DRAFT) -> tuple[int, ...]:
    """The tree sizes (nodes) Token Recycling may build on this cost curve, none above
    `ceiling` (the draft budget) nor MAX_DRAFT.

    Each fills the rows of a point of the curve, or of the sizes curves are measured at (steps
    of about 1.5x, so any budget finds a tree not far below it), or the whole budget: between
    its points a curve is interpolated, so those are where it can step up. And each could pay
    if every path were accepted to its full depth: an s-node tree adds at most min(s,
    MAX_DEPTH) tokens, so a flat curve allows every size and a steep one only small trees. The
    selector picks among them each step by expected tokens per unit of cost."""
    top = min(ceiling, MAX_DRAFT)
    fills = {x - 1 for x in (*MEASURED_ROWS, *curve.xs)} | {top}
    return tuple(
        s for s in sorted(fills) if 1 <= s <= top and curve.rel(s + 1) < 1 + min(s, MAX_DEPTH)
    )


# Prior chance that the model's next token is the table's candidate of rank r (warm table).
RANK_PRIOR = (0.45, 0.12, 0.06, 0.04, 0.03, 0.02, 0.015, 0.01)
# Counted as this many observed rows. Rank rates learn from every verified row (up to DRAFT_ROWS
# a step, and the prompt's rows), where the SAM acceptance prior (policy/acceptance.py, 4.0)
# counts whole draft steps: 200 rows are a few steps' evidence, as 4 steps are for SAM.
RANK_PRIOR_WEIGHT = 200.0
# The same for the fallback row (most frequent emitted tokens): a weak unigram guess, learnt
# from one observation per step, so it holds less weight.
FALLBACK_PRIOR = (0.06, 0.04, 0.03, 0.02, 0.02, 0.015, 0.01, 0.01)
FALLBACK_PRIOR_WEIGHT = 50.0
# Realised over predicted accepted tokens, each kept as a running sum that keeps this share per
# step (about the last 50 steps): it corrects the rank-rate model's optimism for deep paths.
CALIBRATION_DECAY = 0.98
# The templates are rebuilt from the rank rates after this many forwards observed (and at each
# reply's start): often enough to follow the rates, rarely enough to cost nothing per step.
REFRESH_EVERY = 32
