"""The drafting policy, every rule and number of it: how likely a draft is to be accepted
(acceptance.py), the selector that picks each step's draft on this machine's cost curve within
the draft-row ceiling (selector.py), the rules a session follows around it and one reply's
drafting (drafting.py), the host's time per step priced beside the curve (hostcost.py), and
Token Recycling's own numbers with the tree sizes a cost curve allows it (recycling.py)."""

from __future__ import annotations

from samchat.decoding.policy.acceptance import (
    REPLY_FADE,
    REPLY_START,
    AcceptanceModel,
    best_sequence_length,
    bucket,
    expected_sequence,
)
from samchat.decoding.policy.drafting import (
    CALIBRATE_EVERY,
    PROMPT_LOGITS,
    PROMPT_ROWS,
    REST_SAMPLE,
    Drafting,
    begin_reply,
    calibration_due,
    draft_budget,
    prompt_rows,
)
from samchat.decoding.policy.hostcost import HostCosts
from samchat.decoding.policy.selector import MAX_DRAFT, PLAIN, STEEP_MAX_DRAFT, Decision, Selector

__all__ = [
    "CALIBRATE_EVERY",
    "MAX_DRAFT",
    "PLAIN",
    "PROMPT_LOGITS",
    "PROMPT_ROWS",
    "REPLY_FADE",
    "REPLY_START",
    "REST_SAMPLE",
    "STEEP_MAX_DRAFT",
    "AcceptanceModel",
    "Decision",
    "Drafting",
    "HostCosts",
    "Selector",
    "begin_reply",
    "best_sequence_length",
    "bucket",
    "calibration_due",
    "draft_budget",
    "expected_sequence",
    "prompt_rows",
]
