"""The flat engine's tiles read into huge pages (samchat/engines/flat/hugepages.py) against the
same tiles mapped from the kept file in 4 KB pages, alternated in one process on one model.

    python scripts/ab_pages.py FILE [--cached 256] [--rounds 6]

The model is loaded twice, once each way, with the copy's time budget lifted (so the copy is
made wherever the system offers huge pages at all); each copy then times forwards of 1 and 8
rows after the same cached tokens, the two taking turns, 15 forwards per size and turn. Prints
each way's median and fastest per size, and how much of the process is in huge pages."""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from samchat.engines.flat import hugepages
from samchat.engines.flat.native import build
from samchat.models import load_model
from samchat.models.loader import ModelSpec
from samchat.paths import cache_dir, model_cache_dir


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--cached", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    if build.load(model_cache_dir()) is not None:
        print("the native forward does not build here", file=sys.stderr)
        return 1
    if not hugepages.offered():
        print("this system offers no huge pages", file=sys.stderr)
        return 1
    space: Any = torch.ops.samchat_flat
    handed: list[tuple[Any, ...]] = []
    load = space.load

    def keep_args(*given: Any) -> Any:
        handed.append(given)
        return load(*given)

    space.load = keep_args
    hugepages.BUDGET_S_PER_GB = float("inf")
    offered = hugepages.offered
    models = []
    for huge in (True, False):
        hugepages.offered = (lambda: True) if huge else (lambda: False)
        lm = load_model(ModelSpec(source=str(args.file), engine="flat", dtype="int4"))
        lm.kind.open(lm, cache_dir())
        models.append(lm)  # keeps its tensors alive
    hugepages.offered = offered
    space.load = load
    in_huge = sum(
        int(line.split()[1])
        for line in Path("/proc/self/smaps").read_text().splitlines()
        if line.startswith("AnonHugePages")
    )
    print(f"{args.file.name}, {args.cached} cached tokens; {in_huge >> 10} MB in huge pages")
    none = torch.empty(0, dtype=torch.long)
    prompt = torch.tensor(np.random.default_rng(0).integers(100, 20000, args.cached))
    runs = {}
    for name, (tensors, kinds, dims, eps) in zip(("huge pages", "mapped"), handed, strict=True):
        layers, _, _, _, kv, hd = dims
        handle = load(tensors, kinds, dims, eps)
        cache = torch.zeros(layers, 2, kv, args.cached + 16, hd, dtype=torch.bfloat16)
        space.forward(handle, prompt, none, none, 0, cache, 0)
        runs[name] = (handle, cache)
    times: dict[tuple[str, int], list[float]] = {(n, r): [] for n in runs for r in (1, 8)}
    for _ in range(args.rounds):
        for name, (handle, cache) in runs.items():
            for rows in (1, 8):
                ids = torch.arange(1000, 1000 + rows)
                taken = []
                for _ in range(15):
                    t0 = time.perf_counter()
                    space.forward(handle, ids, none, none, args.cached, cache, rows)
                    taken.append(time.perf_counter() - t0)
                times[(name, rows)].append(1000 * statistics.median(taken))
    for (name, rows), ms in times.items():
        print(
            f"  {rows} rows, {name}: median {statistics.median(ms):.2f} ms, fastest {min(ms):.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
