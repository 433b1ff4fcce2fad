"""Turning logits into the token the model commits: greedy, or temperature/top-k/top-p sampling.

Speculative sampling with deterministic drafts (the draft puts all its probability on one token
per node) reduces to this: at each tree node, try the children in order, accepting child c with
probability p'(c), where p' is the target distribution with the children already rejected removed
and renormalised; if all are rejected, sample the bonus from the final residual. The probability
that this commits token x is exactly p(x), the same as drawing x ~ p once and descending into the
child holding x if there is one. samchat does the latter: one draw per committed token, so with
the same seed, speculative sampling commits exactly the tokens plain sampling commits.

Logits rows are numpy float32 arrays on the host, whichever engine made them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from samchat.decoding.params import SamplingParams

Row = npt.NDArray[np.float32]


def _softmax(scores: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    e = np.exp(scores - scores.max())
    out: npt.NDArray[np.float64] = e / e.sum()
    return out


def processed_probs(logits: Row, params: SamplingParams) -> npt.NDArray[np.float64]:
    """Probabilities after temperature, top-k and top-p (HF's order), for a 1D logits row."""
    scores = logits.astype(np.float64) / params.temperature
    n = scores.shape[-1]
    if 0 < params.top_k < n:
        kth = np.partition(scores, n - params.top_k)[n - params.top_k]
        scores[scores < kth] = -np.inf
    if params.top_p < 1.0:
        order = np.argsort(-scores, kind="stable")
        sorted_probs = _softmax(scores[order])
        # Drop tokens once the mass before them already reaches top_p; the top token always stays.
        before = np.cumsum(sorted_probs) - sorted_probs
        remove = before >= params.top_p
        remove[0] = False
        scores[order[remove]] = -np.inf
    return _softmax(scores)


class Sampler:
    """Chooses the committed token for a logits row; one random draw per call when sampling."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.greedy = params.greedy
        # A seed gives the same draws on every machine and engine (numpy's PCG64).
        self.rng = None if self.greedy else np.random.default_rng(params.seed)

    def choose(self, logits: Row) -> int:
        if self.greedy:
            return int(logits.argmax())
        probs = processed_probs(logits, self.params)
        # Inverse CDF: one uniform draw, the first token whose cumulative mass passes it.
        cdf = np.cumsum(probs)
        assert self.rng is not None
        u = self.rng.random() * cdf[-1]
        return int(min(np.searchsorted(cdf, u, side="right"), len(cdf) - 1))
