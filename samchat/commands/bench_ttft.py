"""`samchat bench ttft`: time to first token over a long chat, with and without KV reuse.

With the cache kept across turns, turn k prefills only its new user message, so time to first
token stays flat while the history grows; recomputing the whole prompt each turn grows with it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.cli_options import add_model_options, spec_from_args
from samchat.decoding.params import METHODS, DecodingConfig
from samchat.messages import Message
from samchat.names import named

if TYPE_CHECKING:
    from samchat.decoding.protocols import SessionModel

TOPICS = (
    "the history of the printing press",
    "how bees make honey",
    "why the sky is blue",
    "the rules of chess",
    "how a bicycle stays upright",
    "the water cycle",
    "how vaccines work",
    "the first moon landing",
    "what a compiler does",
    "how tides are caused",
    "the life of a star",
    "how bread rises",
)


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("ttft", help="time to first token over a long chat, KV reuse vs none")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument(
        "--method",
        default=DecodingConfig().method,
        choices=METHODS,
        help="how to decode (default: the chat default, %(default)s)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    add_model_options(parser)
    parser.set_defaults(func=run)


def _user_turn(i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    return f"Question {i + 1}: explain {topic} in a short paragraph for a curious student."


def measure(
    lm: SessionModel, turns: int, max_new_tokens: int, method: str
) -> list[dict[str, float]]:
    """One chat per mode, same questions; the reused chat's answers feed both histories."""
    from samchat.decoding import ChatSession, ReplyDone, SamplingParams

    params = SamplingParams(max_new_tokens=max_new_tokens)
    reuse = ChatSession(lm, DecodingConfig(method=named(method, METHODS)))
    fresh = ChatSession(lm, DecodingConfig(method=named(method, METHODS)))
    messages: list[Message] = [{"role": "system", "content": "You are a helpful tutor."}]
    rows: list[dict[str, float]] = []  # figures by name; turns and token counts are ints
    for i in range(turns):
        messages.append({"role": "user", "content": _user_turn(i)})
        row: dict[str, float] = {"turn": i + 1}
        for name, session in (("reuse", reuse), ("recompute", fresh)):
            if name == "recompute":
                session.reset()  # no cache: the whole history is prefilled again
            done = None
            for event in session.generate(messages, params):
                if isinstance(event, ReplyDone):
                    done = event
            assert done is not None
            row[f"{name}_ttft_s"] = done.stats.ttft_s
            row[f"{name}_prefill_s"] = done.stats.prefill_s
            row["prompt_tokens"] = done.stats.prompt_tokens
            if name == "reuse":
                row["reused_tokens"] = done.stats.reused_tokens
                reply = done.text
        messages.append({"role": "assistant", "content": reply})
        rows.append(row)
    return rows


def format_rows(rows: list[dict[str, float]]) -> str:
    lines = [
        "| turn | prompt tokens | reused | TTFT reuse (s) | TTFT recompute (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['turn']} | {r['prompt_tokens']} | {r['reused_tokens']} | "
            f"{r['reuse_ttft_s']:.3f} | {r['recompute_ttft_s']:.3f} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from samchat.errors import SamchatError
    from samchat.models import load_model

    if args.turns < 1 or args.max_new_tokens < 1:
        raise SamchatError("--turns and --max-new-tokens must be at least 1")

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    lm = load_model(spec_from_args(args), progress=say)
    rows = measure(lm, args.turns, args.max_new_tokens, args.method)
    print(f"{lm.name} on {lm.device}, method {args.method}, {args.max_new_tokens} new tokens/turn")
    print(format_rows(rows))
    if args.json:
        args.json.write_text(json.dumps({"model": lm.name, "rows": rows}, indent=1))
    return 0
