"""The tests' shared, typed stand-ins: a model record as ChatSession reads it, an engine on a
fake clock, a drafter that proposes what it is told, and a reply's stored figures for tests
that save replies they did not generate.
Fakes are for properties (what a measurement or the loop does with given costs); losslessness
is tested on the real model."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from samchat.chat.record import StoredStats
from samchat.decoding.events import ReplyStats
from samchat.decoding.protocols import Drafter
from samchat.decoding.tree import DraftTree
from samchat.engines import Logits
from samchat.engines.costs import CostCurve
from samchat.engines.costs.cache import CurveMemo
from samchat.engines.layout import TreeLayout


@dataclass
class ModelRecord:
    """What ChatSession and the engines read from a LoadedModel, for a model the test built
    itself (a tiny random Llama): no tokenizer, no EOS."""

    model: Any
    vocab_size: int
    context_limit: int = 512
    tokenizer: Any = None
    device: Any = "cpu"
    name: str = "tiny-llama"
    source: str = "tiny"
    fingerprint: str = "tiny"
    eos_ids: tuple[int, ...] = ()
    engine: str = "torch"
    steps: str = "dynamic"
    curves: CurveMemo = field(default_factory=CurveMemo)

    @property
    def device_type(self) -> str:
        return str(getattr(self.device, "type", self.device))


def stored_stats(tokens: int = 0, seconds: float = 0.0, finish_reason: str = "stop") -> StoredStats:
    """The record of a reply a test wrote itself: `tokens` plain steps in `seconds`."""
    speed = tokens / seconds if seconds else 0.0
    figures = ReplyStats(tokens=tokens, seconds=seconds, tokens_per_s=speed, steps=tokens, mat=1.0)
    return StoredStats(figures, finish_reason)


class _Pending:
    """Logits a GPU has not computed yet: reading one finishes the work on the fake clock."""

    def __init__(self, engine: ClockedEngine, work: float) -> None:
        self.engine, self.work = engine, work

    def __getitem__(self, index: Any) -> _Pending:
        return self

    def __float__(self) -> float:
        self.engine.now += self.work
        self.work = 0.0
        return 0.0


class ClockedEngine:
    """An Engine whose forwards cost time on a fake clock: n rows cost n units, plus `switch`
    when the row count differs from the forward before (llama.cpp rebuilding its graph). With
    `asynchronous`, a forward returns after a 0.1-unit launch and its rows' work is paid when
    its logits are first read (a GPU). Logits are zeros of `vocab` columns."""

    name = "clocked"
    device_type = "cpu"
    prefill_chunk = 256
    exact_rows = 64
    plain_reason: str | None = None
    tree_reason: str | None = None
    inexact_reason: str | None = None

    def __init__(self, switch: float = 1.5, asynchronous: bool = False, vocab: int = 4) -> None:
        self.switch, self.asynchronous, self.vocab = switch, asynchronous, vocab
        self.now = 0.0
        self.last = 0  # rows of the forward before
        self.read = 0  # prompt tokens prefilled, in all
        self.rows = 0  # rows in the cache

    def clock(self) -> float:
        return self.now

    @property
    def length(self) -> int:
        return self.rows

    def reset(self) -> None:
        self.last = 0
        self.rows = 0

    def crop(self, length: int) -> None:
        self.rows = min(self.rows, length)

    def plan_read(self, cached: int, new: int) -> None:
        pass

    def stop_reading(self) -> None:
        pass

    def prefill(self, ids: list[int], logits: int = 0) -> Logits | None:
        self.last = len(ids)
        self.read += len(ids)
        self.rows += len(ids)
        return np.zeros((logits, self.vocab), dtype=np.float32) if logits > 0 else None

    def forward(self, ids: list[int], layout: TreeLayout | None = None) -> Logits:
        n = len(ids)
        self.rows += n
        if self.asynchronous:
            self.now += 0.1
            pending: Any = _Pending(self, float(n))
            return pending
        self.now += n + (self.switch if n != self.last else 0.0)
        self.last = n
        return np.zeros((n, self.vocab), dtype=np.float32)

    def commit(self, start: int, keep: list[int]) -> None:
        self.rows = start + len(keep)

    @property
    def meter(self) -> ClockedEngine:
        return self  # its own meter: a flat curve, measured never

    def fit(self, measure: bool = True) -> None:
        pass

    def cost_curve(self, cancelled: Callable[[], bool] | None = None) -> CostCurve:
        return CostCurve.flat()

    def cached_cost_curve(self) -> CostCurve | None:
        return None

    def describe(self) -> str:
        return "a fake clock"


DraftShape = Literal["sequence", "pairs", "siblings"]


class FakeDrafter(Drafter):
    """A drafter that proposes from `tokens`, for tests of the policy and the decoding loop.

    `shape` is what a proposal of at most n nodes looks like:
    - "sequence": the next n tokens in a row (an automaton's draft);
    - "pairs": a two-level tree, each token a child of the root with `token + 1000` below it;
    - "siblings": a chain in which every level holds a wrong sibling first, then the right
      token (`token + 1` modulo `vocab`): trees get walked.

    With `follow`, `tokens` is the reply's script: begin() starts it over and advance() moves
    along it as tokens are committed (a drafter that proposes plain decoding's own output, so
    every draft is accepted). Without, it proposes from the start each time.
    `match` is what match_len() says (tests change it between steps); `expected` is the
    tokens a draft of 8 nodes is expected to get accepted, in proportion for other sizes.
    `delay`: seconds each proposal takes (a drafter slow on the host, on purpose).
    `asked` records the size of each proposal asked for, `feedbacks` each feedback()."""

    def __init__(
        self,
        name: str,
        tokens: Sequence[int],
        *,
        match: int = 0,
        shape: DraftShape = "sequence",
        follow: bool = False,
        tree_sizes: Sequence[int] = (),
        expected: float = 0.0,
        vocab: int = 49152,
        delay: float = 0.0,
    ) -> None:
        self.name = name
        self.tokens = list(tokens)
        self.match = match
        self.shape: DraftShape = shape
        self.follow = follow
        self.sizes = tuple(tree_sizes)
        self.expected = expected
        self.vocab = vocab
        self.delay = delay
        self.pos = 0
        self.asked: list[int] = []
        self.feedbacks: list[int] = []

    def begin(self, context: Sequence[int]) -> None:
        if self.follow:
            self.pos = 0

    def match_len(self) -> int:
        return self.match

    def tree_sizes(self) -> Sequence[int]:
        return self.sizes

    def expected_accepted(self, max_nodes: int) -> float:
        return self.expected * max_nodes / 8

    def propose(self, max_nodes: int) -> DraftTree | None:
        self.asked.append(max_nodes)
        if self.delay:
            time.sleep(self.delay)
        seq = self.tokens[self.pos : self.pos + max_nodes]
        if not seq:
            return None
        if self.shape == "sequence":
            return DraftTree.sequence(seq, self.name)
        tokens: list[int] = []
        parents: list[int] = []
        if self.shape == "pairs":
            for t in seq:
                if len(tokens) + 2 > max_nodes:
                    break
                tokens += [t, t + 1000]
                parents += [-1, len(tokens) - 2]
            return DraftTree(tokens, parents, self.name) if tokens else None
        parent = -1
        for t in seq[: max(1, max_nodes // 2)]:
            tokens += [(t + 1) % self.vocab, t]
            parents += [parent, parent]
            parent = len(tokens) - 1
        return DraftTree(tokens, parents, self.name)

    def advance(self, tokens: Sequence[int]) -> None:
        if self.follow:
            self.pos += len(tokens)

    def feedback(self, accepted: int) -> None:
        self.feedbacks.append(accepted)
