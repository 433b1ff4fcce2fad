"""`samchat bench index`: the suffix-automaton core and static index against a dict baseline."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

from samchat.errors import SamchatError


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "index", help="build speed, size, match/draft cost and load time of the static index"
    )
    parser.add_argument("--tokens", type=int, default=2_000_000, help="corpus size (tokens)")
    parser.add_argument(
        "--load-tokens",
        type=int,
        default=10_000_000,
        help="size of the index whose load time is measured (0: skip)",
    )
    parser.add_argument("--baseline-tokens", type=int, default=300_000)
    parser.add_argument("--pure-tokens", type=int, default=50_000)
    parser.add_argument(
        "--corpus",
        choices=("tokenizer", "words"),
        default="tokenizer",
        help="tokenize Python sources with the default model's tokenizer, or split into words",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat import paths
    from samchat.bench.index import format_report, run_bench

    for name in ("tokens", "baseline_tokens", "pure_tokens"):
        if getattr(args, name) < 1000:
            raise SamchatError(f"--{name.replace('_', '-')} must be at least 1000")
    if args.load_tokens < 0:
        raise SamchatError("--load-tokens must be 0 (skip) or positive")

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    res = run_bench(
        args.tokens,
        args.load_tokens,
        args.baseline_tokens,
        args.pure_tokens,
        args.corpus,
        say,
        cache_dir=paths.cache_dir() / "bench",
    )
    res["machine"] = platform.platform()
    res["date"] = time.strftime("%Y-%m-%d")
    res["command"] = "samchat bench index " + " ".join(sys.argv[3:])
    print(format_report(res))
    if args.json:
        try:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(res, indent=1) + "\n")
        except OSError as exc:
            raise SamchatError(f"cannot write {args.json}: {exc.strerror}") from exc
    return 0
