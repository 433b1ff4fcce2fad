"""How likely a draft is to be accepted: running per-token rates of SAM sequence drafts per
drafter and match length, faded per reply, and the length of sequence draft they make pay on a
cost curve."""

from __future__ import annotations

from samchat.decoding.policy.hostcost import Prices

# Acceptance of SAM sequence drafts, by match-length bucket: prior per-token acceptance rate.
_BUCKET_EDGES = (1, 2, 3, 4, 5, 8, 16, 32)
_PRIOR_RATE = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85)
# Counted as this many observed steps: a sequence draft's evidence is one step per draft, so
# a few steps of this reply outweigh the prior (Token Recycling's prior counts rows: see
# policy/recycling.py).
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


def best_sequence_length(rate: float, cap: int, curve: Prices) -> tuple[int, float]:
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
