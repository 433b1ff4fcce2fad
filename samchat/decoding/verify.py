"""One verification: [pending] + a draft in one forward, the model's own choice at each row
walking the draft (a sequence: while it agrees; a tree: TreeLayout.walk), and the accepted
path committed. Greedy output thus equals plain decoding token for token."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import NamedTuple

from samchat.decoding.reading import PromptReader
from samchat.decoding.sampling import Sampler
from samchat.decoding.tree import DraftTree
from samchat.engines import Logits


class Verified(NamedTuple):
    ids: list[int]  # the inputs: [pending] + the draft's tokens
    path: list[int]  # the accepted inputs' indices (1..), in order
    bonus: int  # the model's own next token after the path
    logits: Logits  # one row per input


class VerifyTimes:
    """Where a verification's seconds went: the tree's layout, the engine's forward."""

    __slots__ = ("engine", "tree")

    def __init__(self) -> None:
        self.tree = 0.0
        self.engine = 0.0


def verify_step(
    reader: PromptReader,
    pending: int,
    tree: DraftTree | None,
    sampler: Sampler,
    times: VerifyTimes | None = None,
) -> Verified:
    """One forward over [pending] + draft; commits pending and the accepted path to the cache.
    `times`, if given, gets the seconds of the layout and of the engine's forward."""
    n_cached = len(reader.tokens)
    layout = None
    clock = time.perf_counter
    t0 = clock()
    if tree is None:
        ids = [pending]
    else:
        ids = [pending, *tree.tokens]
        if not tree.is_sequence:
            layout = tree.layout()
    t1 = clock()
    logits = reader.engine.forward(ids, layout)
    if times is not None:
        times.tree = t1 - t0
        times.engine = clock() - t1
    choose: Callable[[int], int]
    if sampler.greedy:  # only the rows the walk visits

        def choose(j: int) -> int:
            return int(logits[j].argmax())
    else:

        def choose(j: int) -> int:
            return sampler.choose(logits[j])

    if tree is None:
        path: list[int] = []
        bonus = choose(0)
    elif layout is None:  # a sequence: accept while the model agrees
        toks = tree.tokens
        m = len(toks)
        j = 0
        while True:
            t = choose(j)
            if j < m and t == toks[j]:
                j += 1
                continue
            bonus = t
            break
        path = list(range(1, j + 1))
    else:
        path, bonus = layout.walk(choose)
    reader.commit(n_cached, [0, *path], ids)
    return Verified(ids, path, bonus, logits)
