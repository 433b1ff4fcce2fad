"""Token Recycling's numbers (samchat/decoding/recycling.py runs them): its table's width, its
tree sizes and depth, the priors of its rank rates, and how it tracks its own accuracy."""

from __future__ import annotations

from samchat.decoding.policy.selector import MAX_DRAFT

K = 8  # next-token candidates kept per token
# Tree sizes (nodes) the drafter builds templates for: inputs (1 + nodes) of 2, 4, 8, 12 ...
# DRAFT_ROWS rows. The selector picks among them on the cost curve each step (Selector's
# _aux_size and tree_can_pay), within the cap the curve sets.
TREE_SIZES = (1, 3, 7, 11, 15, 23, 31, 47, MAX_DRAFT)
MAX_DEPTH = 6
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
