"""Token Recycling: a `vocab x k` table of next-token candidates, refreshed from every
verification forward, drafts trees from a template of child-rank paths.

After each forward, for every verified position j (accepted or not): adj[input_j] =
topk(logits_j, k). A draft starts at the last committed token; a template node with path
(r1, ..., rd) takes rank rd among the candidates of its parent's token. The table persists
across turns and chats (saved per model in the cache directory), so a new session starts warm.

The table is an int32 numpy array (saved as a `.npy` file); the logits it learns from come to
the host from every engine. propose() gathers the tree level by level, one small gather per
depth.

When the last token has no row yet (a bonus token never fed to the model), the tree's first
level is instead the tokens the model has emitted most often in this session (a fallback row
with its own rank rates), and its deeper levels follow the table as usual.

Template shape and size come from running statistics: how often the model's own next token is
the candidate of rank r. With those rates the expected accepted length of a template is the
sum over its nodes of the product of the rates along the path, which lets the selection step
weigh a tree of any size against its forward cost. Which sizes it builds templates for the policy
decides from the cost curve (policy/recycling.py's tree_sizes, through allow_tree_sizes).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from samchat.decoding.policy.recycling import (
    CALIBRATION_DECAY,
    FALLBACK_PRIOR,
    FALLBACK_PRIOR_WEIGHT,
    MAX_DEPTH,
    RANK_PRIOR,
    RANK_PRIOR_WEIGHT,
    REFRESH_EVERY,
    K,
    tree_sizes,
)
from samchat.decoding.protocols import Drafter, SessionModel
from samchat.decoding.tree import DraftTree
from samchat.engines.costs import CostCurve
from samchat.names import TOKEN_RECYCLING

if TYPE_CHECKING:
    from samchat.engines.base import Logits

log = logging.getLogger(__name__)


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


def expected_accepted(
    template: Sequence[tuple[int, ...]],
    rates: Sequence[float],
    first: Sequence[float] | None = None,
) -> float:
    """Sum over the template's nodes of the product of the rates along the path; `first`:
    other rates for the first level (the fallback row's)."""
    top = rates if first is None else first
    total = 0.0
    for path in template:
        p = top[path[0]]
        for r in path[1:]:
            p *= rates[r]
        total += p
    return total


def smoothed(prior: Sequence[float], weight: float, hits: Sequence[int], seen: int) -> list[float]:
    """Rates hits / seen, smoothed by `prior` counted as `weight` observations."""
    total = weight + seen
    return [(p * weight + h) / total for p, h in zip(prior, hits, strict=True)]


# top_k_rows reads a row as _GROUP rows of vocab // _GROUP logits: group g holds ids g, g + G,
# g + 2G, ... (G = vocab // _GROUP), so the groups' maxima are element-wise maxima of contiguous
# runs, read at memory speed (a maximum over each run of neighbours took several times longer).
# The k best lie in the k groups with the highest maxima, so only those k * _GROUP logits are
# gathered and sorted; a ragged tail is one group more. Of 16 to 128, 32 took least on 8 and 32
# rows of a 49,152- and a 128,256-token vocabulary.
_GROUP = 32

IntArray = npt.NDArray[np.int64]
Table = npt.NDArray[np.int32]  # candidate ids by token and rank (-1: none)


def top_k_rows(logits: Logits, k: int) -> IntArray:
    """Each row's k highest-scoring token ids, best first: (rows, k)."""
    rows, vocab = logits.shape
    groups = vocab // _GROUP
    if groups <= k:
        idx = np.argpartition(logits, vocab - k, axis=-1)[:, vocab - k :]
    else:
        whole = groups * _GROUP
        # Row r's element (i, g) is its logit i * groups + g (a view where the rows hold
        # whole groups only, as vocabularies padded to a multiple of 128 do).
        grid = (logits if whole == vocab else logits[:, :whole]).reshape(rows, _GROUP, groups)
        maxima = grid.max(axis=1)
        if whole < vocab:  # the ragged tail is one more group
            maxima = np.concatenate([maxima, logits[:, whole:].max(-1, keepdims=True)], axis=1)
        ng = maxima.shape[1]
        best = np.argpartition(maxima, ng - k, axis=-1)[:, ng - k :, None]
        step = np.arange(_GROUP)
        cand = np.where(best < groups, best + groups * step, whole + step).reshape(rows, -1)
        outside = cand >= vocab  # past the tail: never chosen
        vals = np.take_along_axis(logits, np.minimum(cand, vocab - 1), axis=-1)
        vals[outside] = -np.inf
        pick = np.argpartition(vals, vals.shape[1] - k, axis=-1)[:, vals.shape[1] - k :]
        idx = np.take_along_axis(cand, pick, axis=-1)
    order = np.argsort(-np.take_along_axis(logits, idx, axis=-1), axis=-1, kind="stable")
    out: IntArray = np.take_along_axis(idx, order, axis=-1)
    return out


class _Plan:
    """A template as gathers from the flattened table: per depth, each node's parent (an index
    into the depth above) and rank. `parents` numbers the nodes for the DraftTree."""

    __slots__ = ("levels", "parents")

    def __init__(self, template: Sequence[tuple[int, ...]]) -> None:
        node_of = {path: i for i, path in enumerate(template)}
        self.parents = [node_of[p[:-1]] if len(p) > 1 else -1 for p in template]
        self.levels: list[tuple[IntArray, IntArray]] = []
        first: dict[int, int] = {}  # depth -> its first node (the template is by depth)
        for i, path in enumerate(template):
            first.setdefault(len(path), i)
        for depth in sorted(first):
            nodes = [i for i, p in enumerate(template) if len(p) == depth]
            above = first.get(depth - 1, 0)  # depth 1 has no parent level: rel unused
            rel = np.array([max(self.parents[i] - above, 0) for i in nodes], dtype=np.int64)
            ranks = np.array([template[i][-1] for i in nodes], dtype=np.int64)
            self.levels.append((rel, ranks))

    def candidates(self, flat: Table, k: int, last: int, first: Table | None = None) -> list[int]:
        """Each node's candidate (-1 under a missing one); `first`: the row to take the first
        level from instead of last's."""
        ranks = self.levels[0][1]
        level = flat.take(ranks + k * last) if first is None else first.take(ranks)
        found = [level]
        for rel, ranks in self.levels[1:]:
            # Under a -1 parent the index wraps to the last row (numpy wraps negative
            # indices): propose() drops those nodes with their parent.
            level = flat.take(ranks + k * level.take(rel))
            found.append(level)
        out: list[int] = np.concatenate(found).tolist()
        return out


class TokenRecyclingDrafter(Drafter):
    name = TOKEN_RECYCLING
    wants_logits = True

    def __init__(self, vocab_size: int, k: int = K, path: Path | None = None) -> None:
        self.vocab_size = vocab_size
        self.k = k
        self.path = path
        table = self._load(path) if path is not None else None
        if table is None:
            table = np.full((vocab_size, k), -1, dtype=np.int32)
        self.adj = table  # written by observe() only
        self._flat = table.reshape(-1)  # a view: propose() gathers from it
        # Rows with a rank-0 candidate, kept on the host: the selector asks every step.
        self._known = table[:, 0] >= 0
        # How often the model emitted each token this session: the fallback row's source.
        # Kept incrementally (a few microseconds a step): the drafter also counts while it
        # rests, on llama.cpp's 10 ms steps.
        self._emitted = [0] * vocab_size
        self._top: list[int] = []  # the k most emitted, most first (ties: lower id first)
        self.fallback_hits = [0] * k
        self.fallback_seen = 0
        # Rank hits and rows seen beyond the prior.
        self.hits = np.zeros(k, dtype=np.int64)
        self.seen = 0
        self._plans: dict[int, _Plan] = {}
        # The sizes it builds templates for: what a free verification allows, until the policy
        # gives those of this machine's curve (allow_tree_sizes).
        self._sizes = tree_sizes(CostCurve.flat())
        self._dirty = False
        self._last = -1
        # Realised / predicted accepted tokens: corrects the independence assumption of the
        # rank-rate model (it is optimistic for deep paths), smoothed by a prior of 1.
        self._actual = 8.0
        self._predicted = 8.0
        self._pending_prediction = 0.0
        self._refresh()

    @classmethod
    def for_model(cls, lm: SessionModel, cache_dir: Path | None = None) -> TokenRecyclingDrafter:
        """The table of lm, kept under cache_dir across sessions (None: this session only)."""
        vocab = lm.vocab_size
        if cache_dir is None:
            return cls(vocab, K)
        # `source` (where the weights came from) where the model has one: a LoadedModel's.
        ident = f"{getattr(lm, 'source', '')}|{lm.name}|{vocab}"
        digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
        return cls(vocab, K, cache_dir / "token_recycling" / f"{digest}.npy")

    # -- persistence --------------------------------------------------------------------------

    def _load(self, path: Path) -> Table | None:
        try:
            table = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable Token Recycling table %s: %s", path, exc)
            return None
        if table.shape != (self.vocab_size, self.k) or table.dtype != np.int32:
            log.warning("ignoring Token Recycling table %s of shape %s", path, table.shape)
            return None
        if table.min() < -1 or table.max() >= self.vocab_size:
            log.warning("ignoring Token Recycling table %s with out-of-range ids", path)
            return None
        # C order: the flat view propose() gathers from must be the table's own memory.
        loaded: Table = np.ascontiguousarray(table)
        return loaded

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
        return smoothed(RANK_PRIOR[: self.k], RANK_PRIOR_WEIGHT, self.hits.tolist(), self.seen)

    @property
    def fallback_rates(self) -> list[float]:
        return smoothed(
            FALLBACK_PRIOR[: self.k],
            FALLBACK_PRIOR_WEIGHT,
            self.fallback_hits,
            self.fallback_seen,
        )

    def _refresh(self) -> None:
        rates = self.rank_rates
        first = self.fallback_rates
        self._templates = {s: build_template(rates, s) for s in self._sizes}
        self._expected = {s: expected_accepted(t, rates) for s, t in self._templates.items()}
        self._expected_fallback = {
            s: expected_accepted(t, rates, first) for s, t in self._templates.items()
        }
        self._plans.clear()
        self._since_refresh = 0

    def tree_sizes(self) -> Sequence[int]:
        return self._sizes

    def allow_tree_sizes(self, sizes: Sequence[int]) -> None:
        sizes = tuple(sizes)
        if sizes != self._sizes:
            self._sizes = sizes
            self._refresh()

    def _size(self, max_nodes: int) -> int:
        """The largest tree size that fits in max_nodes (0 if none does)."""
        return max((s for s in self._sizes if s <= max_nodes), default=0)

    def _expectations(self) -> dict[int, float] | None:
        """Expected accepted tokens per tree size from the current token: its own row's, the
        fallback row's where it has none yet, or None where there is nothing to draft from."""
        if self._last < 0:
            return None
        if self._known[self._last]:
            return self._expected
        return self._expected_fallback if self._top else None

    def expected_accepted(self, max_nodes: int) -> float:
        size = self._size(max_nodes)
        expected = self._expectations()
        return expected[size] * self.calibration if size and expected is not None else 0.0

    def potential(self, max_nodes: int) -> float:
        size = self._size(max_nodes)
        return self._expected[size] * self.calibration if size else 0.0

    @property
    def calibration(self) -> float:
        return self._actual / self._predicted

    def feedback(self, accepted: int) -> None:
        self._actual = CALIBRATION_DECAY * self._actual + accepted
        self._predicted = CALIBRATION_DECAY * self._predicted + self._pending_prediction

    # -- the drafter --------------------------------------------------------------------------

    def begin(self, context: Sequence[int]) -> None:
        self._last = int(context[-1]) if context else -1
        self._refresh()

    def advance(self, tokens: Sequence[int]) -> None:
        if not tokens:
            return
        top = self._top
        if self._last >= 0 and not self._known[self._last] and top:
            # The step began from a token without a row: how would the fallback have done?
            self.fallback_seen += 1
            if tokens[0] in top:
                self.fallback_hits[top.index(tokens[0])] += 1
        emitted = self._emitted
        for t in tokens:
            # Counts only grow: a token can only enter the top k as its own count grows.
            emitted[t] += 1
            if t not in top:
                if len(top) == self.k:
                    if (-emitted[t], t) > (-emitted[top[-1]], top[-1]):
                        continue
                    top.pop()
                top.append(t)
            top.sort(key=lambda x: (-emitted[x], x))
        self._last = int(tokens[-1])

    def propose(self, max_nodes: int) -> DraftTree | None:
        size = self._size(max_nodes)
        expected = self._expectations()
        if size == 0 or expected is None:
            return None
        self._pending_prediction = expected[size]
        plan = self._plans.get(size)
        if plan is None:
            plan = self._plans[size] = _Plan(self._templates[size])
        first = None  # the fallback row
        if not self._known[self._last]:
            # The k most emitted tokens, most first (-1 where fewer were emitted).
            first = np.full(self.k, -1, dtype=np.int32)
            first[: len(self._top)] = self._top
        cand = plan.candidates(self._flat, self.k, self._last, first)
        if -1 not in cand:
            return DraftTree(cand, list(plan.parents), self.name)
        # Drop the nodes without a candidate, and their subtrees.
        new_index = [-1] * len(cand)
        tokens: list[int] = []
        parents: list[int] = []
        for i, (tok, parent) in enumerate(zip(cand, plan.parents, strict=True)):
            if tok < 0 or (parent >= 0 and new_index[parent] < 0):
                continue
            new_index[i] = len(tokens)
            tokens.append(tok)
            parents.append(new_index[parent] if parent >= 0 else -1)
        return DraftTree(tokens, parents, self.name) if tokens else None

    def observe(self, input_ids: Sequence[int], logits: Logits) -> None:
        """adj[input_j] = topk(logits_j): every verified position, accepted or not."""
        ids = [int(t) for t in input_ids]
        top = top_k_rows(logits, self.k).astype(np.int32)
        old = self.adj[ids]
        # Where did the model's own choice sit among the old candidates?
        known = old[:, 0] >= 0
        self.hits += ((old == top[:, :1]) & known[:, None]).sum(0)
        self.seen += int(known.sum())
        # A repeated id keeps its last row.
        last = {t: j for j, t in enumerate(ids)}
        if len(last) < len(ids):
            top = top[list(last.values())]
        self.adj[list(last)] = top
        self._known[list(last)] = True
        self._dirty = True
        self._since_refresh += 1
        if self._since_refresh >= REFRESH_EVERY:
            self._refresh()
