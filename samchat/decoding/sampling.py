"""Turning logits into the token the model commits: greedy, or temperature/top-k/top-p sampling.

Speculative sampling with deterministic drafts (the draft puts all its probability on one token
per node) reduces to this: at each tree node, try the children in order, accepting child c with
probability p'(c), where p' is the target distribution with the children already rejected removed
and renormalised; if all are rejected, sample the bonus from the final residual. The probability
that this commits token x is exactly p(x), the same as drawing x ~ p once and descending into the
child holding x if there is one. samchat does the latter: one draw per committed token, so with
the same seed, speculative sampling commits exactly the tokens plain sampling commits.
"""

from __future__ import annotations

import torch

from samchat.decoding.params import SamplingParams


def processed_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Probabilities after temperature, top-k and top-p (HF's order), for a 1D logits row."""
    scores = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < scores.shape[-1]:
        kth = torch.topk(scores, params.top_k).values[-1]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True)
        sorted_probs = sorted_scores.softmax(-1)
        # Drop tokens once the mass before them already reaches top_p; the top token always stays.
        before = sorted_probs.cumsum(-1) - sorted_probs
        remove = before >= params.top_p
        remove[0] = False
        scores = scores.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return scores.softmax(-1)


class Sampler:
    """Chooses the committed token for a logits row; one random draw per call when sampling."""

    def __init__(self, params: SamplingParams, device: torch.device) -> None:
        self.params = params
        self.greedy = params.greedy
        self.generator: torch.Generator | None = None
        if not self.greedy:
            self.generator = torch.Generator(device=device)
            if params.seed is not None:
                self.generator.manual_seed(params.seed)
            else:
                self.generator.seed()

    def choose(self, logits: torch.Tensor) -> int:
        if self.greedy:
            return int(logits.argmax())
        probs = processed_probs(logits, self.params)
        return int(torch.multinomial(probs, 1, generator=self.generator))
