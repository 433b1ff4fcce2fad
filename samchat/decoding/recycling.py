"""Token Recycling: a `vocab x k` table of next-token candidates, refreshed from every
verification forward, drafts trees from a template of child-rank paths.

After each forward, for every verified position j (accepted or not): adj[input_j] =
topk(logits_j, k). A draft starts at the last committed token; a template node with path
(r1, ..., rd) takes rank rd among the candidates of its parent's token. The table persists
across turns and chats (saved per model in the cache directory), so a new session starts warm.

Template shape and size come from running statistics: how often the model's own next token is
the candidate of rank r. With those rates the expected accepted length of a template is the
sum over its nodes of the product of the rates along the path, which lets the selection step
weigh a tree of any size against its forward cost.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from samchat.decoding.drafter import Drafter
from samchat.decoding.tree import DraftTree

log = logging.getLogger(__name__)

K = 8
# Inputs = 1 + nodes: 2, 4, 8, 16 ... rows, the shapes the CPU kernels run fastest.
SIZES = (1, 3, 7, 11, 15, 23, 31, 47, 63)
MAX_DEPTH = 6
# The table also learns from the last new prompt rows of each turn (as SAM-D does from all of
# them): their logits cost one output projection per row at prefill.
PROMPT_ROWS = 64
# Prior chance that the model's next token is the table's candidate of rank r (warm table).
_PRIOR_RANK = (0.45, 0.12, 0.06, 0.04, 0.03, 0.02, 0.015, 0.01)
_PRIOR_WEIGHT = 200.0


def build_template(
    rates: Sequence[float], size: int, max_depth: int = MAX_DEPTH
) -> list[tuple[int, ...]]:
    """The `size` rank paths with the highest product of rates (best-first), parents first."""
    heap: list[tuple[float, tuple[int, ...]]] = [(-rates[r], (r,)) for r in range(len(rates))]
    heapq.heapify(heap)
    out: list[tuple[int, ...]] = []
    while heap and len(out) < size:
        neg, path = heapq.heappop(heap)
        out.append(path)
        if len(path) < max_depth:
            for r in range(len(rates)):
                heapq.heappush(heap, (neg * rates[r], (*path, r)))
    out.sort(key=lambda p: (len(p), p))  # parents (shorter prefixes) before children
    return out


def expected_accepted(template: Sequence[tuple[int, ...]], rates: Sequence[float]) -> float:
    total = 0.0
    for path in template:
        p = 1.0
        for r in path:
            p *= rates[r]
        total += p
    return total


class TokenRecyclingDrafter(Drafter):
    name = "tr"
    wants_logits = True

    def __init__(self, vocab_size: int, k: int = K, path: Path | None = None) -> None:
        self.vocab_size = vocab_size
        self.k = k
        self.path = path
        self.adj = np.full((vocab_size, k), -1, dtype=np.int32)
        if path is not None:
            self._load(path)
        self.hits = np.array([p * _PRIOR_WEIGHT for p in _PRIOR_RANK[:k]], dtype=np.float64)
        self.seen = _PRIOR_WEIGHT
        self._dirty = False
        self._last = -1
        # Realised / predicted accepted tokens: corrects the independence assumption of the
        # rank-rate model (it is optimistic for deep paths), smoothed by a prior of 1.
        self._actual = 8.0
        self._predicted = 8.0
        self._pending_prediction = 0.0
        self._refresh()

    @classmethod
    def for_model(cls, lm: Any, cache_dir: Path | None = None) -> TokenRecyclingDrafter:
        """The table of lm, kept under cache_dir across sessions (None: this session only)."""
        vocab = int(lm.vocab_size)
        if cache_dir is None:
            return cls(vocab, K)
        ident = f"{getattr(lm, 'source', '')}|{getattr(lm, 'name', '')}|{vocab}"
        digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
        return cls(vocab, K, cache_dir / "token_recycling" / f"{digest}.npy")

    # -- persistence --------------------------------------------------------------------------

    def _load(self, path: Path) -> None:
        try:
            table = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable Token Recycling table %s: %s", path, exc)
            return
        if table.shape != self.adj.shape or table.dtype != np.int32:
            log.warning("ignoring Token Recycling table %s of shape %s", path, table.shape)
            return
        if table.min() < -1 or table.max() >= self.vocab_size:
            log.warning("ignoring Token Recycling table %s with out-of-range ids", path)
            return
        self.adj = table

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
            with open(tmp, "wb") as fh:
                np.save(fh, self.adj, allow_pickle=False)
            os.replace(tmp, self.path)
            self._dirty = False
        except OSError as exc:  # a read-only cache only costs a cold start next time
            log.warning("could not save the Token Recycling table: %s", exc)

    def finish(self) -> None:
        self.save()

    # -- statistics ---------------------------------------------------------------------------

    @property
    def rank_rates(self) -> list[float]:
        return [float(h / self.seen) for h in self.hits]

    def _refresh(self) -> None:
        rates = self.rank_rates
        self._templates = {s: build_template(rates, s) for s in SIZES}
        self._expected = {s: expected_accepted(t, rates) for s, t in self._templates.items()}
        self._since_refresh = 0

    def tree_sizes(self) -> Sequence[int]:
        return SIZES

    def expected_accepted(self, max_nodes: int) -> float:
        size = max((s for s in SIZES if s <= max_nodes), default=0)
        if size == 0 or self._last < 0 or self.adj[self._last, 0] < 0:
            return 0.0
        return self._expected[size] * self.calibration

    def potential(self, max_nodes: int) -> float:
        size = max((s for s in SIZES if s <= max_nodes), default=0)
        return self._expected[size] * self.calibration if size else 0.0

    @property
    def calibration(self) -> float:
        return self._actual / self._predicted

    def feedback(self, accepted: int) -> None:
        self._actual = 0.98 * self._actual + accepted
        self._predicted = 0.98 * self._predicted + self._pending_prediction

    # -- the drafter --------------------------------------------------------------------------

    def begin(self, context: Sequence[int]) -> None:
        self._last = int(context[-1]) if context else -1
        self._refresh()

    def advance(self, tokens: Sequence[int]) -> None:
        if tokens:
            self._last = int(tokens[-1])

    def propose(self, max_nodes: int) -> DraftTree | None:
        size = max((s for s in SIZES if s <= max_nodes), default=0)
        if size == 0 or self._last < 0:
            return None
        self._pending_prediction = self._expected[size]
        adj = self.adj
        tokens: list[int] = []
        parents: list[int] = []
        node_of: dict[tuple[int, ...], int] = {}
        for path in self._templates[size]:
            if len(path) == 1:
                parent, ptok = -1, self._last
            else:
                pnode = node_of.get(path[:-1])
                if pnode is None:
                    continue  # its parent had no candidate
                parent, ptok = pnode, tokens[pnode]
            tok = int(adj[ptok, path[-1]])
            if tok < 0:
                continue
            node_of[path] = len(tokens)
            tokens.append(tok)
            parents.append(parent)
        return DraftTree(tokens, parents, self.name) if tokens else None

    def observe(self, input_ids: Sequence[int], logits: Any) -> None:
        """adj[input_j] = topk(logits_j): every verified position, accepted or not."""
        top = torch.topk(logits, self.k, dim=-1).indices.to(torch.int32).cpu().numpy()
        ids = np.asarray(input_ids, dtype=np.int64)
        old = self.adj[ids]
        known = old[:, 0] >= 0
        if known.any():
            # Where did the model's own choice sit among the old candidates?
            match = old[known] == top[known, :1]
            self.hits += match.sum(axis=0)
            self.seen += float(known.sum())
        self.adj[ids] = top
        self._dirty = True
        self._since_refresh += 1
        if self._since_refresh >= 32:
            self._refresh()
