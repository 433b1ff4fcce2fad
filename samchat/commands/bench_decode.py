"""`samchat bench decode`: speed, MAT and lossless-ness of each method on Spec-Bench questions."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from samchat.cli_options import add_model_options, spec_from_args
from samchat.errors import SamchatError


def register_bench(sub: Any) -> None:
    parser = sub.add_parser("decode", help="compare decoding methods on Spec-Bench questions")
    parser.add_argument("--questions", type=Path, default=None, help="Spec-Bench-format JSONL")
    parser.add_argument("--methods", default="plain,pld,sam,tr,sam+tr")
    parser.add_argument("--per-category", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--warm-chats",
        type=int,
        default=0,
        help="first chat through N questions per category (not evaluated) to grow the index",
    )
    parser.add_argument(
        "--warm-methods",
        default=None,
        help="methods to evaluate again after the warm-up (default: all of --methods); "
        "unless plain is named, the warm table compares against the runs of plain before it",
    )
    parser.add_argument(
        "--max-draft",
        type=int,
        default=0,
        help="largest draft in tokens (default 0: fitted to the hardware)",
    )
    parser.add_argument(
        "--selection",
        choices=("adaptive", "threshold"),
        default="adaptive",
        help="adaptive: source and size by expected tokens per unit of cost (default); "
        "threshold: SAM-Decoding's rule, the SAM draft on a long match, else the biggest "
        "Token Recycling tree that fits --max-draft",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--png", type=Path, default=None, help="chart of speedup by category")
    add_model_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat.bench.decode import (
        DecodeBench,
        default_questions_path,
        format_table,
        load_questions,
        parse_methods,
        pick,
        plot,
        warm_plan,
    )
    from samchat.models import load_model

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    methods = parse_methods(args.methods)
    warm_methods, rerun_plain = warm_plan(methods, args.warm_methods)
    path = args.questions or default_questions_path()
    questions = load_questions(path)
    evaluated = pick(questions, args.per_category, skip=args.warm_chats)
    if args.max_draft < 0:
        raise SamchatError(f"--max-draft must be >= 0, got {args.max_draft}")
    lm = load_model(spec_from_args(args), progress=say)
    bench = DecodeBench(
        lm,
        methods,
        args.max_new_tokens,
        progress=say,
        max_draft=args.max_draft,
        adaptive=args.selection == "adaptive",
    )
    output: dict[str, Any] = {
        "meta": {
            "model": lm.name,
            "device": str(lm.device),
            "machine": platform.platform(),
            "date": time.strftime("%Y-%m-%d"),
            "questions": str(path),
            "per_category": args.per_category,
            "max_new_tokens": args.max_new_tokens,
            "warm_chats": args.warm_chats,
            "max_draft": args.max_draft,
            "selection": args.selection,
            "command": "samchat " + " ".join(sys.argv[1:]),
        }
    }
    try:
        bench.prepare()
        cold_results = bench.run(evaluated)
        cold = cold_results.table()
        output.update(cold)
        print("## without warm-up\n" + format_table(cold))
        tables = {"cold": cold}
        if args.warm_chats:
            bench.warm_up(pick(questions, args.warm_chats))
            bench.methods = warm_methods if rerun_plain else warm_methods[1:]
            warm_results = bench.run(evaluated)
            if not rerun_plain:  # plain decoding reads no index: its first runs still hold
                warm_results.runs["plain"] = cold_results.runs["plain"]
                warm_results.methods = warm_methods
            warm = warm_results.table()
            output["warm"] = warm
            tables["warm"] = warm
            print(f"\n## after {args.warm_chats} warm-up chats per category\n" + format_table(warm))
    finally:
        bench.close()
    if args.json:
        args.json.write_text(json.dumps(output, indent=2))
    if args.png:
        for name, table in tables.items():
            target = args.png if name == "cold" else args.png.with_stem(args.png.stem + "-warm")
            plot(table, target, f"{lm.name} on {lm.device}: speedup over plain ({name})")
    return 0
