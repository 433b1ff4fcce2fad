"""`samchat bench engines`: times each engine and weight format that can run a GGUF model on
this machine, prints them, and keeps the result, so that the app and `serve` decode on the
fastest (where the engine and dtype are left to auto); each engine's verification costs are
measured and kept too, so that a first reply drafts."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from samchat.cli_options import add_model_options, spec_from_args


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "engines",
        help="time each engine/format on this machine and keep the fastest for the app and serve",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    add_model_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat.engines.cpu import cpu_name
    from samchat.models.engine_choice import measure, why
    from samchat.paths import cache_dir

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    spec = spec_from_args(args)
    speeds = measure(spec, cache_dir(), say)
    best = min(speeds, key=lambda s: s.ms_per_token)
    width = max(len(s.label) for s in speeds)
    print(f"one-token steps, {cpu_name()}")
    for s in speeds:
        mark = "  <- the app and serve use this" if s is best else ""
        rate = 1000 / s.ms_per_token
        print(f"{s.label:<{width}}  {s.ms_per_token:6.2f} ms  {rate:6.1f} tok/s{mark}")
    if args.json is not None:
        out = {
            "cpu": cpu_name(),
            "speeds": [asdict(s) for s in speeds],
            "chosen": best.label,
            "why": why(spec, best.engine, cache_dir()),
        }
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0
