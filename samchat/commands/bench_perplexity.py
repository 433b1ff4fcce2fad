"""`samchat bench perplexity`: each configuration's perplexity on the same text, e.g. llama.cpp
against the flat engine (int4, the file's own numbers) on the same GGUF."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.cli_options import add_model_options, spec_from_args
from samchat.errors import SamchatError, one_line

if TYPE_CHECKING:
    from samchat.bench.perplexity import MethodFigures, Perplexity
    from samchat.models.loader import ModelSpec


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("perplexity", help="perplexity of a text per engine/dtype")
    parser.add_argument("--text", type=Path, required=True, help="a UTF-8 text file")
    parser.add_argument(
        "--methods",
        default="llamacpp,flat/int4",
        help="comma-separated ENGINE[/DTYPE] (default llamacpp,flat/int4)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=None,
        metavar="TOKENS",
        help="read the text in windows of this many tokens, each from an empty cache, as "
        "llama.cpp's perplexity does (default: one window, up to the model's context); "
        "with several, each difference gets its noise. From 256, llama.cpp keeps the F16 "
        "cache its own perplexity keeps",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    add_model_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat.bench.decode import setup_spec
    from samchat.bench.perplexity import paired_noise, parse_setups
    from samchat.engines.cpu import cpu_name
    from samchat.models.loader import choose_engine

    try:
        text = args.text.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SamchatError(f"cannot read --text {args.text}: {exc}") from None
    base = replace(spec_from_args(args), engine=getattr(args, "engine", "auto") or "auto")
    if args.window is not None and args.window < 2:
        raise SamchatError(f"--window {args.window}: a window needs 2 tokens or more")
    labels = parse_setups(args.methods)
    specs = {label: setup_spec(base, label) for label in labels}

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    # A method that fails is reported after the others ran: their figures are not lost.
    results: dict[str, MethodFigures] = {}
    failed: dict[str, str] = {}
    first: Perplexity | None = None
    for label, spec in specs.items():
        try:
            choose_engine(spec)
            figures, measured = _measure(label, spec, text, args.window, say)
        except SamchatError as exc:
            say(f"{label}: failed ({one_line(exc)})")
            failed[label] = one_line(exc)
            continue
        if first is None:
            first = measured
        else:
            figures["noise"] = paired_noise(first, measured)
        results[label] = figures
    print(f"{args.text.name}, {cpu_name()}")
    if results:
        top = next(iter(results.values()))["perplexity"]
        width = max(len(label) for label in results)
        for label, r in results.items():
            apart = f"{r['perplexity'] / top - 1:+.2%}"
            noise = f" ± {r['noise']:.2%}" if r["noise"] is not None else ""
            print(f"{label:<{width}}  {r['perplexity']:.4f}  ({apart}{noise})")
    if args.json is not None:
        out = {
            "text": str(args.text),
            "window": args.window,
            "cpu": cpu_name(),
            "methods": results,
            "failed": failed,
        }
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    if failed:
        raise SamchatError("; ".join(f"{label} failed: {why}" for label, why in failed.items()))
    return 0


def _measure(
    label: str, spec: ModelSpec, text: str, window: int | None, say: Callable[[str], None]
) -> tuple[MethodFigures, Perplexity]:
    """One method's perplexity on text, with what ran it."""
    from samchat.bench.perplexity import perplexity
    from samchat.models import load_model

    lm = load_model(spec, progress=say)
    ids = list(lm.tokenizer(text, add_special_tokens=False)["input_ids"])
    limit = lm.context_limit
    if window is not None and window > limit:
        raise SamchatError(f"--window {window} is longer than the model's context ({limit})")
    if window is None and len(ids) > limit:
        say(f"{label}: the text's {len(ids)} tokens cut to the model's context ({limit})")
        ids = ids[:limit]
    engine = lm.kind.open(lm)
    t0 = time.perf_counter()
    result = perplexity(engine, ids, window=window)
    seconds = time.perf_counter() - t0
    say(f"{label}: {result.perplexity:.4f} over {result.tokens} tokens ({seconds:.1f} s)")
    figures: MethodFigures = {
        "perplexity": result.perplexity,
        "tokens": result.tokens,
        "dtype": lm.dtype,
        "engine": engine.meter.describe(),
        "windows": len(result.window_nll),
        "noise": None,
    }
    return figures, result
