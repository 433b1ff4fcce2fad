"""`samchat bench decode`: speed, MAT and lossless-ness of each method on Spec-Bench questions,
on one or several engine/dtype configurations (`--methods llamacpp:sam+tr,torch:plain`)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from samchat.cli_options import add_model_options, spec_from_args
from samchat.errors import SamchatError

if TYPE_CHECKING:
    from samchat.bench.decode import EngineDetails
    from samchat.bench.report import Table
    from samchat.engines.costs.curve import CostCurve
    from samchat.models.loader import LoadedModel


class Meta(TypedDict):
    """The JSON's "meta": the machine, the engines' versions, each configuration's model and
    the options; then what the run found out (the engines' kernels and curves, changed replies)."""

    model: str
    device: str
    machine: str
    cpu: str
    cpu_flags: list[str]
    versions: dict[str, str]
    configurations: dict[str, dict[str, str]]  # label -> engine, model, dtype, device, source
    default_configuration: str
    methods: list[str]
    date: str
    questions: str
    per_category: int
    repeat: int
    max_new_tokens: int
    warm_chats: int
    max_draft: int
    selection: str
    cost_curve: str
    corpus: str | None
    rag: bool
    command: str
    llamacpp_pld: NotRequired[dict[str, str | int | bool]]
    replies_changed_between_runs: NotRequired[int]
    engines: NotRequired[dict[str, EngineDetails]]


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("decode", help="compare decoding methods on Spec-Bench questions")
    parser.add_argument("--questions", type=Path, default=None, help="Spec-Bench-format JSONL")
    parser.add_argument(
        "--methods",
        default="plain,pld,sam,tr,sam+tr",
        help="comma-separated METHOD or ENGINE[/DTYPE]:METHOD (engines torch, llamacpp, flat; "
        "methods plain, pld, sam, tr, sam+tr), e.g. llamacpp:pld,llamacpp:sam+tr,"
        "torch/bfloat16:plain,flat/int4:sam+tr; a bare METHOD runs on the default engine "
        "(--engine, or what auto picks), ENGINE: without a dtype on --dtype where it takes "
        "it. Each configuration's plain runs too: its speedups are measured against it",
    )
    parser.add_argument("--per-category", type=int, default=3)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run the questions N times, each time from fresh sessions, and keep each "
        "method's fastest run of each question (steadier ratios on a busy machine; replies "
        "must not change between runs). With --warm-chats, the warm table runs once",
    )
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
        "unless a configuration's plain is named, the warm table compares against the runs "
        "of that plain before it",
    )
    parser.add_argument(
        "--max-draft",
        type=int,
        default=0,
        help="largest draft in tokens (default 0: fitted to the hardware)",
    )
    parser.add_argument(
        "--cost-curve",
        default="measured",
        metavar="measured|flat|FILE",
        help="what the selector takes verification to cost: measured on this machine (default); "
        "flat: up to 64 rows cost one row, as on a GPU, to measure the MAT a GPU would get "
        '(its timings are no speed claim); FILE: a JSON curve {"relative_cost": {"1": 1.0, ...}}',
    )
    parser.add_argument(
        "--selection",
        choices=("adaptive", "threshold"),
        default="adaptive",
        help="adaptive: source and size by expected tokens per unit of cost (default); "
        "threshold: SAM-Decoding's rule, the SAM draft on a long match, else the biggest "
        "Token Recycling tree that fits --max-draft",
    )
    parser.add_argument(
        "--corpus",
        type=Path,
        default=None,
        metavar="DIR",
        help="import DIR into the benchmark's private store and static index first",
    )
    parser.add_argument(
        "--rag",
        action="store_true",
        help="answer with retrieval on: the best passages of --corpus go before each question",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--png", type=Path, default=None, help="chart of speedup by category")
    add_model_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat.bench.baselines import llama_pld_settings
    from samchat.bench.decode import (
        DecodeBench,
        default_questions_path,
        default_setup,
        load_questions,
        parse_methods,
        pick,
        setup_spec,
        warm_plan,
    )
    from samchat.bench.report import format_host, format_table, plot, split_key
    from samchat.models import load_model
    from samchat.models.loader import choose_engine

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    base = replace(spec_from_args(args), engine=getattr(args, "engine", "auto") or "auto")
    default = default_setup(base)
    methods = parse_methods(args.methods, default, base.dtype)
    warm_methods, reused_plains = warm_plan(methods, args.warm_methods, default, base.dtype)
    path = args.questions or default_questions_path()
    questions = load_questions(path)
    evaluated = pick(questions, args.per_category, skip=args.warm_chats)
    if args.repeat < 1:
        raise SamchatError(f"--repeat must be >= 1, got {args.repeat}")
    if args.max_draft < 0:
        raise SamchatError(f"--max-draft must be >= 0, got {args.max_draft}")
    curve = cost_curve_option(args.cost_curve)
    if args.rag and args.corpus is None:
        raise SamchatError("--rag retrieves from --corpus DIR: pass the documents' directory")
    if args.corpus is not None and not args.corpus.is_dir():
        raise SamchatError(f"--corpus {args.corpus} is not a directory")
    labels = list(dict.fromkeys(split_key(m)[0] for m in methods))
    specs = {label: setup_spec(base, label) for label in labels}
    for spec in specs.values():  # every configuration can run (engine, file, llama_cpp) first
        choose_engine(spec)
    models = {label: load_model(spec, progress=say) for label, spec in specs.items()}
    bench = DecodeBench(
        models,
        methods,
        args.max_new_tokens,
        progress=say,
        max_draft=args.max_draft,
        adaptive=args.selection == "adaptive",
        cost_curve=curve,
    )
    first = models[labels[0]]
    meta = _meta(args, path, models, methods, default)
    output: dict[str, object] = {"meta": meta}
    if any(models[split_key(k)[0]].kind.native_gguf and split_key(k)[1] == "pld" for k in methods):
        meta["llamacpp_pld"] = llama_pld_settings()
    tables: dict[str, Table] = {}
    try:
        if args.corpus is not None:
            summary = bench.load_corpus(args.corpus)
            say(f"corpus: {len(summary.documents)} documents from {args.corpus}")
            bench.rag = args.rag
        bench.prepare()
        for label, lm in models.items():  # --dtype auto settled as the sessions opened
            meta["configurations"][label]["dtype"] = lm.dtype
        cold_results = bench.run_passes(evaluated, args.repeat)
        if cold_results.changed:
            say(f"warning: {cold_results.changed} replies differed between runs")
        cold = cold_results.table()
        output.update(cold)
        meta["replies_changed_between_runs"] = cold_results.changed
        meta["engines"] = bench.engine_details()
        print("## without warm-up\n" + format_table(cold))
        host = format_host(cold)
        if host:
            print("\n" + host)
        tables["cold"] = cold
        if args.warm_chats:
            bench.warm_up(pick(questions, args.warm_chats))
            bench.methods = tuple(m for m in warm_methods if m not in reused_plains)
            warm_results = bench.run(evaluated)
            for plain in reused_plains:  # plain decoding reads no index: its runs still hold
                warm_results.runs[plain] = cold_results.runs[plain]
            warm_results.methods = warm_methods
            warm = warm_results.table()
            output["warm"] = warm
            tables["warm"] = warm
            print(f"\n## after {args.warm_chats} warm-up chats per category\n" + format_table(warm))
            host = format_host(warm)
            if host:
                print("\n" + host)
    finally:
        bench.close()
    if args.json:
        args.json.write_text(json.dumps(output, indent=2))
    if args.png:
        where = ", ".join(labels)
        for name, table in tables.items():
            target = args.png if name == "cold" else args.png.with_stem(args.png.stem + "-warm")
            plot(table, target, f"{first.name} ({where}): speedup over plain ({name})")
    return 0


def _meta(
    args: argparse.Namespace,
    path: Path,
    models: dict[str, LoadedModel],
    methods: tuple[str, ...],
    default: str,
) -> Meta:
    """The machine, the engines' versions and each configuration's model."""
    import torch

    from samchat.engines.cpu import cpu_flags, cpu_name

    first = next(iter(models.values()))
    versions = {"torch": str(torch.__version__)}
    if any(lm.kind.native_gguf for lm in models.values()):
        from samchat.engines.llamacpp.model import version

        versions["llama_cpp_python"] = version()
    return {
        "model": first.name,
        "device": str(first.device),
        "machine": platform.platform(),
        "cpu": cpu_name(),
        "cpu_flags": cpu_flags(),
        "versions": versions,
        "configurations": {
            label: {
                "engine": lm.engine,
                "model": lm.name,
                "dtype": lm.dtype,
                "device": str(lm.device),
                "source": str(lm.source),
            }
            for label, lm in models.items()
        },
        "default_configuration": default,
        "methods": list(methods),
        "date": time.strftime("%Y-%m-%d"),
        "questions": str(path),
        "per_category": args.per_category,
        "repeat": args.repeat,
        "max_new_tokens": args.max_new_tokens,
        "warm_chats": args.warm_chats,
        "max_draft": args.max_draft,
        "selection": args.selection,
        "cost_curve": args.cost_curve,
        "corpus": str(args.corpus) if args.corpus is not None else None,
        "rag": args.rag,
        "command": "samchat " + " ".join(sys.argv[1:]),
    }


def cost_curve_option(value: str) -> CostCurve | None:
    """--cost-curve: None (measured), the flat curve, or a fixed curve read from a file."""
    from samchat.engines.costs import CostCurve

    if value == "measured":
        return None
    named = CostCurve.named(value)
    return named if named is not None else CostCurve.from_file(Path(value))
