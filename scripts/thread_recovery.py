"""How soon the flat engine's thread choice (samchat/engines/flat/threads.py) comes back to
every core after a long load on one of them, with and without its look at the idle cores
(idle.py).

    python scripts/thread_recovery.py FILE [--loaded 2200] [--core 1]

For each way, in one process: one-row forwards after 64 cached tokens, 200 quiet, then
--loaded with `yes` pinned to --core (Linux's taskset), then 1,200 quiet again. Prints the
forwards (and seconds) the quiet machine took to run on every core again, and the mean step of
the first and last 200 quiet forwards."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from samchat.engines.flat.engine import FlatEngine
from samchat.engines.flat.idle import IdleCores
from samchat.models import load_model
from samchat.models.loader import ModelSpec
from samchat.paths import cache_dir


def _forwards(engine: FlatEngine, count: int) -> tuple[list[int], list[float]]:
    """`count` one-row forwards at the same place: the thread count kept after each, its time."""
    used, taken = [], []
    length = engine.length
    for i in range(count):
        start = time.perf_counter()
        engine.forward([1000 + i % 50])
        taken.append(time.perf_counter() - start)
        engine.crop(length)
        used.append(engine.threads.current)
    return used, taken


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path, help="a GGUF file the flat engine runs")
    parser.add_argument("--loaded", type=int, default=2200, help="forwards under the load")
    parser.add_argument("--core", type=int, default=1, help="the core the load is pinned to")
    args = parser.parse_args(argv)
    if not args.file.is_file():
        print(f"error: no file {args.file}", file=sys.stderr)
        return 2
    if shutil.which("taskset") is None:
        print("error: taskset (util-linux) is needed to pin the load", file=sys.stderr)
        return 2
    lm = load_model(ModelSpec(source=str(args.file), engine="flat", dtype="int4"))
    for look in (False, True):
        engine = lm.kind.open(lm, cache_dir())
        if not isinstance(engine, FlatEngine):
            print(f"error: {args.file} does not run on the flat engine", file=sys.stderr)
            return 2
        most = engine.threads.most
        if most < 2:
            print("error: one core: no thread choice to watch", file=sys.stderr)
            return 2
        engine.threads.idle = IdleCores().look if look else None
        engine.prefill(list(range(100, 164)))
        _forwards(engine, 200)
        before = dict(engine.threads.ran)
        load = subprocess.Popen(["taskset", "-c", str(args.core), "yes"], stdout=subprocess.DEVNULL)
        try:
            used, _ = _forwards(engine, args.loaded)
        finally:
            load.kill()
            load.wait()
        ran = {k: v - before.get(k, 0) for k, v in engine.threads.ran.items()}
        used, taken = _forwards(engine, 1200)
        back = used.index(most) if most in used else len(used)
        print(
            f"{'with' if look else 'without'} the look: loaded, {ran.get(most - 1, 0)} forwards on "
            f"{most - 1} thread(s), {ran.get(most, 0)} on {most}; quiet again, every core after "
            f"{back} forwards ({sum(taken[:back]):.2f} s); mean step of the first 200 "
            f"{1000 * sum(taken[:200]) / 200:.1f} ms, of the last 200 "
            f"{1000 * sum(taken[-200:]) / 200:.1f} ms",
            flush=True,
        )
        del engine
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
