"""One-token steps and 2-, 4- and 8-row forwards of several engines on one GGUF, alternated in
one process after the same prompt: each engine's step time and its verification curve (the
medians of six forwards per size per round), the weight bytes a step reads per second as a
share of the machine's read bandwidth (measured after each engine's steps in each round; the
median of the rounds' shares), and the prefill of a --prefill-token prompt into an
empty cache (tokens per second, the median over rounds). Issue 61's table in
docs/benchmarks.md.

    python scripts/step_curve.py FILE [--cached 256] [--rounds 3] [--prefill 512]
                                 [--engines llamacpp/auto,flat/int4] [--warm N]

--warm N runs N one-token forwards on each engine first (the flat engine chooses its thread
count while it runs: it has settled after about a hundred); the thread counts the flat
engine's forwards ran on are printed.
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
    from samchat.engines.bandwidth import read_bandwidth, step_bytes
    from samchat.engines.cpu import cpu_name
    from samchat.models import load_model
    from samchat.models.loader import ModelSpec
    from samchat.paths import cache_dir, model_cache_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--cached", type=int, default=256, help="tokens read before timing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prefill", type=int, default=512, help="prompt tokens read, timed")
    parser.add_argument("--engines", default="llamacpp/auto,flat/int4")
    parser.add_argument("--warm", type=int, default=0, help="one-token forwards run first")
    args = parser.parse_args(argv)
    engines = {}
    rng = np.random.default_rng(0)
    prompt = [int(i) for i in rng.integers(100, 20000, max(args.cached, args.prefill))]
    for label in args.engines.split(","):
        engine, dtype = label.split("/")
        lm = load_model(ModelSpec(source=str(args.file), engine=engine, dtype=dtype))
        engines[label] = lm.kind.open(lm, cache_dir())
    for engine in engines.values():
        engine.reset()
        engine.plan_read(0, args.cached)
        engine.prefill(prompt[: args.cached], logits=0)
        for i in range(args.warm):
            start = engine.length
            engine.forward([1000 + i % 100])
            engine.crop(start)
    times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in ROWS} for k in engines}
    reads: dict[str, list[float]] = {k: [] for k in engines}
    # The read bandwidth swings by minutes on a shared machine, so it is measured right after
    # each engine's steps in each round, and each step set against the one beside it.
    beside: dict[str, list[float]] = {k: [] for k in engines}
    for _ in range(args.rounds):
        for label, engine in engines.items():
            engine.reset()
            engine.plan_read(0, args.prefill)
            t0 = time.perf_counter()
            engine.prefill(prompt[: args.prefill], logits=1)
            reads[label].append(args.prefill / (time.perf_counter() - t0))
            engine.reset()
            engine.plan_read(0, args.cached)
            engine.prefill(prompt[: args.cached], logits=0)
            for n in ROWS:
                start, taken = engine.length, []
                for _ in range(6):
                    t0 = time.perf_counter()
                    engine.forward([1000 + i for i in range(n)])
                    taken.append(time.perf_counter() - t0)
                    engine.crop(start)
                times[label][n].append(1000 * statistics.median(taken))
            measured = read_bandwidth(model_cache_dir(), runs=3)
            if measured is not None:
                beside[label].append(measured)
    out = {k: {n: statistics.median(v) for n, v in d.items()} for k, d in times.items()}
    result: dict[str, dict[str, object]] = {}
    for label, ms in out.items():
        curve = " ".join(f"{n} rows {ms[n] / ms[1]:.2f}x" for n in ROWS[1:])
        nbytes = step_bytes(label.split("/")[0], args.file, model_cache_dir())
        share, said, bandwidth = None, "", beside[label]
        if nbytes and len(bandwidth) == len(times[label][1]):
            pairs = zip(times[label][1], bandwidth, strict=True)
            shares = [nbytes / (t / 1000) / b for t, b in pairs]
            share = statistics.median(shares)
            low, high = min(bandwidth) / 1e9, max(bandwidth) / 1e9
            said = f", {share:.0%} of the read bandwidth ({low:.1f}-{high:.1f} GB/s)"
        read = statistics.median(reads[label])
        choice = getattr(engines[label], "threads", None)
        ran = f"; threads {choice.ran}, ending on {choice.current}" if choice is not None else ""
        print(f"{label}: step {ms[1]:.2f} ms{said}, {curve}; prefill {read:.0f} tok/s{ran}")
        result[label] = {
            "ms": ms,
            "bandwidth_share": share,
            "read_bandwidth": bandwidth,
            "prefill_tok_s": read,
        }
    print(json.dumps({"cpu": cpu_name(), "engines": result}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
