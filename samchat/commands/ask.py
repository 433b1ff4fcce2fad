"""`samchat ask "…"`: stream one answer to stdout (headless chat)."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from samchat.cli_options import add_data_dir_option, add_model_options, spec_from_args
from samchat.errors import SamchatError

METHODS = ("sam+tr", "sam", "tr", "plain")


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _temperature(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _probability(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser("ask", help="ask one question and stream the answer to stdout")
    parser.add_argument("prompt", help="the question; '-' reads it from standard input")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--max-new-tokens", type=_positive_int, default=512)
    parser.add_argument("--temperature", type=_temperature, default=0.0, help="0 = greedy")
    parser.add_argument("--top-p", type=_probability, default=1.0)
    parser.add_argument("--top-k", type=int, default=0, help="0 = off")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    parser.add_argument("--method", choices=METHODS, default="sam+tr", help="decoding method")
    parser.add_argument("--stats", action="store_true", help="print decoding statistics")
    parser.add_argument("--no-save", action="store_true", help="do not save this chat")
    parser.add_argument("--chat", type=int, default=None, help="continue the chat with this id")
    add_model_options(parser)
    add_data_dir_option(parser)
    parser.set_defaults(func=run)


def _read_prompt(prompt: str) -> str:
    text = sys.stdin.read() if prompt == "-" else prompt
    if not text.strip():
        raise SamchatError("the prompt is empty; pass a question, or '-' to read it from stdin")
    return text


def run(args: argparse.Namespace) -> int:
    from samchat.decoding import ChatSession, DecodingConfig, ReplyDone, SamplingParams, TextDelta
    from samchat.models import load_model
    from samchat.store import Store
    from samchat.store.turns import begin_turn, finish_turn

    prompt = _read_prompt(args.prompt)
    spec = spec_from_args(args)
    lm = load_model(spec, progress=lambda msg: print(f"[{msg}]", file=sys.stderr))
    with Store.open() as store:
        # The question is committed before decoding, the reply after it (samchat.store.turns).
        turn = begin_turn(
            store,
            prompt,
            chat_id=args.chat,
            model=lm.name,
            system=args.system,
            save=not args.no_save,
        )
        index = _open_index(store, lm)
        session = ChatSession(
            lm, DecodingConfig(method=args.method), static_index=index.index if index else None
        )
        params = SamplingParams(
            max_new_tokens=args.max_new_tokens,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k,
            seed=args.seed,
            stop=tuple(args.stop),
        )
        cancel = threading.Event()
        done: Any = None
        try:
            for event in session.generate(turn.messages, params, cancel):
                if isinstance(event, TextDelta):
                    sys.stdout.write(event.text)
                    sys.stdout.flush()
                elif isinstance(event, ReplyDone):
                    done = event
        except KeyboardInterrupt:
            cancel.set()
            print("\n[cancelled]", file=sys.stderr)
            return 130
        finally:
            if index is not None and done is None:
                index.close()
        sys.stdout.write("\n")
        if done is not None:
            finish_turn(
                store,
                turn,
                done.text,
                model=lm.name,
                stats=done.stats,
                finish_reason=done.finish_reason,
            )
            if index is not None:
                index.sync()  # the finished turn grows the static index
                index.close()
            if turn.chat_id is not None:
                print(f"[saved as chat {turn.chat_id}]", file=sys.stderr)
    if args.stats and done is not None:
        _print_stats(done)
    return 0


def _open_index(store: Any, lm: Any) -> Any:
    """The static index of this model's tokenizer, synced with the store; None if unusable."""
    from samchat.corpus.indexing import IndexManager, tokenizer_codec

    encode, separator = tokenizer_codec(lm.tokenizer)
    manager = IndexManager(store, lm.fingerprint, encode, separator, model=lm.name)
    try:
        manager.open()
    except SamchatError as exc:
        print(f"[static index unavailable: {exc}]", file=sys.stderr)
        return None
    return manager


def _print_stats(done: Any) -> None:
    s = done.stats
    by = ", ".join(f"{k} {v}" for k, v in sorted(s.accepted_by_drafter.items()))
    print(
        f"[{s.tokens} tokens in {s.seconds:.2f}s, {s.tokens_per_s:.1f} tok/s, "
        f"MAT {s.mat:.2f}, ~{s.speedup_est:.2f}x vs plain, {done.finish_reason}; {by}]",
        file=sys.stderr,
    )
