"""One-token steps and 2-, 4- and 8-row forwards of several engines on one GGUF, alternated in
one process after the same prompt: each engine's step time and its verification curve (the
medians of six forwards per size per round). Issue 61's table in docs/benchmarks.md.

    python scripts/step_curve.py FILE [--cached 256] [--rounds 3]
                                 [--engines llamacpp/auto,flat/int4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROWS = (1, 2, 4, 8)


def main(argv: list[str]) -> int:
    from samchat.models import load_model
    from samchat.models.loader import ModelSpec
    from samchat.paths import cache_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--cached", type=int, default=256, help="tokens read before timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engines", default="llamacpp/auto,flat/int4")
    args = parser.parse_args(argv)
    engines = {}
    for label in args.engines.split(","):
        engine, dtype = label.split("/")
        lm = load_model(ModelSpec(source=str(args.file), engine=engine, dtype=dtype))
        opened = lm.kind.open(lm, cache_dir())
        rng = np.random.default_rng(0)
        opened.prefill([int(i) for i in rng.integers(100, 20000, args.cached)], logits=0)
        engines[label] = opened
    times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in ROWS} for k in engines}
    for _ in range(args.rounds):
        for label, engine in engines.items():
            for n in ROWS:
                start, taken = engine.length, []
                for _ in range(6):
                    t0 = time.perf_counter()
                    engine.forward([1000 + i for i in range(n)])
                    taken.append(time.perf_counter() - t0)
                    engine.crop(start)
                times[label][n].append(1000 * statistics.median(taken))
    out = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in times.items()}
    for label, ms in out.items():
        curve = " ".join(f"{n} rows {ms[n] / ms[1]:.2f}x" for n in ROWS[1:])
        print(f"{label}: step {ms[1]:.2f} ms, {curve}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
