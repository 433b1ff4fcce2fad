"""Run in a process of its own (the native forward loads once per process): the int4 engine's
verification rows against one-token steps, k = 1 .. 16 and a random tree, on whatever build of
the native forward this process's environment asks for. Prints the engine and "exact"."""

from __future__ import annotations

import random
import sys

import numpy as np

from samchat.engines.flat.engine import LeanEngine
from samchat.engines.layout import TreeLayout
from samchat.models import load_model
from samchat.models.loader import ModelSpec


def main() -> int:
    lm = load_model(ModelSpec(engine="torch", dtype="int4"))
    engine = LeanEngine(lm)
    print(engine.meter.describe())
    rng = random.Random(5)
    context = [rng.randrange(1000, 40000) for _ in range(70)]
    path = [rng.randrange(49152) for _ in range(17)]
    engine.prefill(context)
    steps = []
    for token in path:
        start = engine.length
        steps.append(engine.forward([token])[0].copy())
        engine.commit(start, [0])
    for k in range(1, 17):
        engine.crop(len(context))
        rows = engine.forward(path[:k])
        for i in range(k):
            if not np.array_equal(rows[i], steps[i]):
                print(f"row {i} of {k} differs")
                return 1
    # A tree whose first branch is the path: its rows there equal the steps.
    engine.crop(len(context))
    parents = [-1, 0, 0, 1, 3, 3, 4, 2]
    tokens = [path[0], path[1], 7, path[2], path[3], 9, path[4], 11]
    layout = TreeLayout(tokens[1:], [p - 1 for p in parents[1:]])  # draft nodes after the root
    rows = engine.forward(tokens, layout)
    for node, depth in ((0, 0), (1, 1), (3, 2), (4, 3), (6, 4)):
        if not np.array_equal(rows[node], steps[depth]):
            print(f"tree node {node} differs")
            return 1
    print("exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
