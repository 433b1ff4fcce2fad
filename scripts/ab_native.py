"""Versions of the flat engine's native forward, alternated in one process on one model and one
cache, so that the machine's swings (memory speed, other tenants) fall on every version alike.

    python scripts/ab_native.py FILE HEAD~1 . --cached 2048 --rounds 8

Each version is a git revision, or "." for the working tree: its forward.cpp, tiles.h and
attention.h are compiled as `make setup` compiles them, under an op namespace of their own, and
loaded side by side. The model is packed and loaded once; every version then times forwards of
each row count in --rows (1 and 8) after the same cached tokens, the versions taking turns, 15
forwards per size and turn. Prints each version's median and fastest per size. Nothing here
changes the kept build or the model cache."""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from samchat.engines.flat.native import build
from samchat.models import load_model
from samchat.models.loader import ModelSpec
from samchat.paths import cache_dir, model_cache_dir

NATIVE = Path("samchat/engines/flat/native")
SOURCES = ("forward.cpp", "tiles.h", "attention.h")


def _sources(version: str) -> dict[str, str]:
    if version == ".":
        return {name: (NATIVE / name).read_text() for name in SOURCES}
    return {
        name: subprocess.run(
            ["git", "show", f"{version}:{NATIVE / name}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for name in SOURCES
    }


def _compile(version: str, work: Path) -> Any:
    """The version's ops, compiled under a namespace named by its sources."""
    texts = _sources(version)
    digest = hashlib.sha256("".join(texts.values()).encode()).hexdigest()[:12]
    space = f"samchat_ab_{digest}"
    folder = work / space
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (folder / name).write_text(text.replace("samchat_flat", space))
    library = folder / "flat.so"
    command = build._command(library)
    command[command.index(str(build.SOURCE))] = str(folder / "forward.cpp")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: {version} does not compile: {done.stderr.strip()[-400:]}")
    torch.ops.load_library(str(library))  # type: ignore[no-untyped-call]
    return getattr(torch.ops, space)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a GGUF file the flat engine runs")
    parser.add_argument("versions", nargs="+", help='git revisions, or "." for the working tree')
    parser.add_argument("--cached", type=int, default=256, help="tokens in the cache")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--rows", default="1,8", help="comma-separated row counts to time")
    args = parser.parse_args(argv)
    try:
        counts = [int(r) for r in args.rows.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        print(f"error: --rows takes positive counts like 1,4,8, not {args.rows!r}", file=sys.stderr)
        return 2
    if not args.file.is_file():
        print(f"error: no file {args.file}", file=sys.stderr)
        return 2
    why = build.load(model_cache_dir())
    if why is not None:
        print(f"error: the native forward is not available: {why}", file=sys.stderr)
        return 2
    # The packed model's tensors, as the engine hands them to the native core.
    handed: list[Any] = []
    space: Any = torch.ops.samchat_flat
    keep = space.load

    def load(*given: Any) -> Any:
        handed[:] = given
        return keep(*given)

    space.load = load
    lm = load_model(ModelSpec(source=str(args.file), engine="flat", dtype="int4"))
    engine = lm.kind.open(lm, cache_dir())
    del engine
    if not handed:
        print("error: the engine did not load the native forward", file=sys.stderr)
        return 2
    tensors, kinds, dims, eps = handed
    with tempfile.TemporaryDirectory() as work:
        ops = {v: _compile(v, Path(work)) for v in args.versions}
        handles = {v: ops[v].load(tensors, kinds, dims, eps) for v in args.versions}
        layers, _, _, _, kv_heads, head_dim = dims
        cache = torch.zeros(layers, 2, kv_heads, args.cached + 16, head_dim, dtype=torch.bfloat16)
        none = torch.empty(0, dtype=torch.long)
        prompt = torch.tensor(np.random.default_rng(0).integers(100, 20000, args.cached))
        first = args.versions[0]
        ops[first].forward(handles[first], prompt, none, none, 0, cache, 0)
        times: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.rounds):
            for v in args.versions:
                for n in counts:
                    ids = torch.arange(1000, 1000 + n)
                    taken = []
                    for _ in range(15):
                        t0 = time.perf_counter()
                        ops[v].forward(handles[v], ids, none, none, args.cached, cache, n)
                        taken.append(time.perf_counter() - t0)
                    times.setdefault((v, n), []).append(1000 * statistics.median(taken))
    print(f"{args.file.name}, {args.cached} cached tokens, {torch.get_num_threads()} threads")
    for n in counts:
        for v in args.versions:
            t = times[(v, n)]
            print(f"  {n} rows, {v}: median {statistics.median(t):.2f} ms, fastest {min(t):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
