"""`samchat bench app`: the same questions through the real app (headless) and through
`samchat ask`, alternating, on the same model, engine and method: does the app decode at the
engine's speed, and do its live figures say what it does?"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from samchat.cli_options import add_model_options, spec_from_args
from samchat.commands.bench_latency import positive
from samchat.errors import SamchatError
from samchat.names import METHODS, Method

QUESTIONS = (
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "Explain in three short paragraphs how a hash table handles collisions.",
    "Write a haiku about autumn, then explain its imagery line by line.",
)


def register_bench(sub: Any) -> None:
    parser = sub.add_parser(
        "app",
        help="the app's decoding speed and live figures against samchat ask's, alternating",
    )
    parser.add_argument(
        "--question",
        action="append",
        default=None,
        help="a question to put through both (repeatable; default: three built-in ones)",
    )
    parser.add_argument(
        "--methods",
        default="plain,sam+tr",
        help="comma-separated decoding methods (default: plain,sam+tr)",
    )
    parser.add_argument("--max-new-tokens", type=positive, default=256)
    parser.add_argument(
        "--rounds", type=positive, default=2, help="rounds of every question (default: 2)"
    )
    parser.add_argument("--json", type=Path, default=None, help="write every run here too")
    add_model_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat import paths
    from samchat.chat.config import load_config
    from samchat.engines.cpu import cpu_name
    from samchat.models.engine_choice import preferred, why
    from samchat.tui.bench import run_bench, summary, write_json

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    known: dict[str, Method] = {m: m for m in METHODS}
    methods: list[Method] = []
    for name in (m.strip() for m in args.methods.split(",") if m.strip()):
        if name not in known:  # one line before anything loads
            raise SamchatError(f"--methods: unknown method {name!r}; known: {', '.join(METHODS)}")
        methods.append(known[name])
    # The engine and format the app takes (measured fastest here, where left to auto); ask
    # is told the same explicitly, so both decode on one engine.
    named = spec_from_args(args, load_config())
    spec = preferred(named, paths.cache_dir())
    questions = list(args.question or QUESTIONS)
    runs = run_bench(
        spec, questions, methods, args.max_new_tokens, args.rounds, paths.cache_dir(), say
    )
    label = spec.engine if spec.dtype == "auto" else f"{spec.engine}/{spec.dtype}"
    print(f"app against samchat ask, {cpu_name()}, {label}, {len(questions)} questions")
    head = (
        "| method | cli tok/s (median, mean) | app tok/s (median, mean) | app/cli (medians) |"
        " app/cli (means) | MAT cli | MAT app | live off | identical |"
    )
    print(head)
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in summary(runs):
        off = max(float(str(row["live_tok_s_off_max"])), float(str(row["live_speedup_off_max"])))
        print(
            f"| {row['method']} | {row['cli_tok_s_median']}, {row['cli_tok_s']} | "
            f"{row['app_tok_s_median']}, {row['app_tok_s']} | "
            f"{row['app_over_cli_median']:.2f} | {row['app_over_cli']:.2f} | "
            f"{row['cli_mat']} | {row['app_mat']} | {100 * off:.1f}% | "
            f"{row['identical_replies']} |"
        )
    if args.json is not None:
        from samchat.models.loader import choose_engine

        engine_why = why(named, choose_engine(spec), paths.cache_dir())
        write_json(args.json, cpu_name(), spec, runs, engine_why)
    return 0
