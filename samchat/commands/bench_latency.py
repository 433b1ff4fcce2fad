"""`samchat bench latency`: what a user waits for, from process start, beside llama-cpp-python's
own `Llama` on the same GGUF and prompt: the first token and the whole answer of a short
question and of questions after 1.5k and 4k tokens of a document, warm and on first use."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from samchat.errors import SamchatError


def _doc_tokens(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of token counts") from None
    if any(v < 16 or v > 7000 for v in values):
        raise argparse.ArgumentTypeError("each document length must be 16 to 7000 tokens")
    return values


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "latency",
        help="first token and whole answer from process start, beside llama-cpp-python",
    )
    parser.add_argument(
        "--model",
        type=Path,
        default=None,
        help="a GGUF file (default: the bundled SmolLM2-135M-Instruct Q4_1)",
    )
    parser.add_argument(
        "--docs",
        type=_doc_tokens,
        default=(1500, 4000),
        metavar="N,N",
        help="document prompt lengths in tokens, comma-separated ('' for none; default 1500,4000)",
    )
    parser.add_argument("--repeat", type=positive, default=3, help="warm runs of each (median)")
    parser.add_argument("--max-new-tokens", type=positive, default=64)
    parser.add_argument(
        "--no-first-use",
        action="store_true",
        help="leave out samchat's first use (a new cache: the model's curve is timed once)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the rows here too")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat.bench import latency
    from samchat.engines.cpu import cpu_name
    from samchat.engines.llamacpp.model import threads, unavailable_reason
    from samchat.engines.registry import GGUF_MAX_CONTEXT
    from samchat.models.default import bundled_gguf

    problem = unavailable_reason()
    if problem is not None:
        raise SamchatError(f"the latency bench runs llama-cpp-python beside samchat: {problem}")
    gguf = args.model.expanduser() if args.model is not None else bundled_gguf()
    if not gguf.is_file():
        raise SamchatError(f"{gguf} is not a file; pass --model with a GGUF file")
    cases = latency.cases(gguf, args.docs)
    n_threads = threads()

    def say(text: str) -> None:
        print(f"[{text}]", file=sys.stderr, flush=True)

    try:
        timings = latency.run(
            gguf,
            doc_tokens=args.docs,
            repeat=args.repeat,
            max_new_tokens=args.max_new_tokens,
            first_use=not args.no_first_use,
            n_ctx=GGUF_MAX_CONTEXT,
            threads=n_threads,
            progress=say,
        )
    except RuntimeError as exc:
        raise SamchatError(str(exc)) from None
    tokens = {c.name: c.tokens for c in cases}
    print(
        f"{gguf.name}, {args.max_new_tokens} new tokens, {cpu_name()}, {n_threads} threads; "
        f"median of {args.repeat} warm runs each, alternating"
    )
    print(latency.table(timings, tokens))
    if args.json is not None:
        rows = [t.to_dict() | {"prompt_tokens": tokens[t.case]} for t in timings]
        report = {
            "model": gguf.name,
            "cpu": cpu_name(),
            "threads": n_threads,
            "max_new_tokens": args.max_new_tokens,
            "rows": rows,
        }
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0
