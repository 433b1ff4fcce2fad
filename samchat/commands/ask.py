"""`samchat ask "…"`: stream one answer to stdout (headless chat)."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from samchat.cli_options import add_data_dir_option, add_model_options, spec_from_args
from samchat.decoding.params import DecodingConfig, Knob, KnobError, SamplingParams, knob_of
from samchat.errors import SamchatError

# The decoding and sampling options, in this order: (dataclass, knob name). Their help, defaults,
# choices and allowed ranges are the knobs' (samchat/decoding/params.py).
KNOB_OPTIONS = (
    (SamplingParams, "max_new_tokens"),
    (SamplingParams, "temperature"),
    (SamplingParams, "top_p"),
    (SamplingParams, "top_k"),
    (SamplingParams, "seed"),
    (SamplingParams, "stop"),
    (DecodingConfig, "method"),
)


def _knob_type(knob: Knob) -> Callable[[str], Any]:
    """An argparse `type`: the option's text parsed and checked by the knob's rules."""

    def parse(text: str) -> Any:
        try:
            return knob.parse(text)
        except KnobError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None

    parse.__name__ = knob.name  # argparse names it in "invalid <name> value"
    return parse


def _add_knob_option(parser: argparse.ArgumentParser, knob: Knob) -> None:
    flag = "--" + knob.name.replace("_", "-")
    text = knob.help.replace("%", "%%")
    if knob.default not in (None, ()):
        text += f" (default: {knob.text(knob.default)})"
    if knob.type is tuple:  # one string per use of the option
        element = replace(knob, type=str)
        parser.add_argument(
            flag, action="append", type=_knob_type(element), default=[], help=f"{text} (repeatable)"
        )
    elif knob.choices:
        parser.add_argument(flag, choices=knob.choices, default=knob.default, help=text)
    else:
        parser.add_argument(flag, type=_knob_type(knob), default=knob.default, help=text)


def register(sub: Any) -> None:
    parser = sub.add_parser("ask", help="ask one question and stream the answer to stdout")
    parser.add_argument(
        "prompt",
        help="the question; '-' reads it from standard input (otherwise piped input is "
        "added to the question as a source)",
    )
    parser.add_argument(
        "-f",
        "--file",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="attach a file the answer should use (repeatable)",
    )
    parser.add_argument(
        "--docs",
        action="store_true",
        help="answer from the imported documents: the best passages go before the question",
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object: text, stats, sources"
    )
    parser.add_argument("--system", default=None, help="system prompt")
    for cls, name in KNOB_OPTIONS:
        _add_knob_option(parser, knob_of(cls, name))
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


def _piped_stdin() -> str | None:
    """Text piped or redirected into us; None for a terminal or anything else (an inherited
    /dev/null, pytest's stand-in), so nothing ever waits on a stdin nobody writes to."""
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return None
    if not (stat.S_ISFIFO(mode) or stat.S_ISREG(mode)):
        return None
    text = sys.stdin.read()
    return text if text.strip() else None


def _sources(args: argparse.Namespace, question: str, store: Any) -> list[Any]:
    """Piped text, then attached files, then retrieved passages; every one is read (and every
    bad one refused) before the model loads or anything is saved."""
    from samchat.corpus.retrieval import read_attachment, retrieve, text_source

    sources = []
    if args.prompt != "-" and (piped := _piped_stdin()) is not None:
        sources.append(text_source(piped))
    sources += [read_attachment(path) for path in args.file]
    if args.docs:
        found = retrieve(store, question)
        if not found:
            _note("no imported passage matches the question; answering without them")
        sources += found
    return sources


def _note(text: str) -> None:
    print(f"[{text}]", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from samchat.chat.record import ReplyRecorder
    from samchat.corpus.retrieval import fit_to_session
    from samchat.decoding import ChatSession, DecodingConfig, ReplyDone, SamplingParams, TextDelta
    from samchat.models import load_model
    from samchat.store import Store
    from samchat.store.turns import begin_turn, finish_turn, title_from

    question = _read_prompt(args.prompt)
    with Store.open() as store:
        # The chat so far (a missing --chat fails here), then the sources: all before the model.
        draft = begin_turn(store, "", chat_id=args.chat, system=args.system, save=False)
        sources = _sources(args, question, store)
        spec = spec_from_args(args, engine=_configured_engine(args))
        lm = load_model(spec, progress=_note)
        index = _open_index(store, lm)
        try:
            session = ChatSession(
                lm, DecodingConfig(method=args.method), static_index=index.index if index else None
            )
            # As many sources as the context holds beside the chat so far.
            fitted = fit_to_session(
                session, draft.messages[:-1], question, sources, args.max_new_tokens
            )
        except BaseException:
            if index is not None:
                index.close()
            raise
        for notice in fitted.notices:
            _note(notice)
        # The question is committed before decoding, the reply after it (samchat.store.turns).
        with store.transaction():
            turn = begin_turn(
                store,
                fitted.content,
                chat_id=args.chat,
                model=lm.name,
                system=args.system,
                save=not args.no_save,
            )
            if fitted.sources and args.chat is None and turn.chat_id is not None:
                store.rename_chat(turn.chat_id, title_from(question))
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
        recorder = ReplyRecorder(sources=[s.record() for s in fitted.sources])
        try:
            for event in session.generate(turn.messages, params, cancel):
                recorder.observe(event)
                if isinstance(event, TextDelta) and not args.json:
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
        stats = recorder.stats(done) if done is not None else {}
        if args.json:
            sources_out = [s.record() for s in fitted.sources]
            text = done.text if done is not None else ""
            print(json.dumps({"text": text, "stats": stats, "sources": sources_out}))
        else:
            sys.stdout.write("\n")
            if fitted.sources:
                _note(
                    "sources: "
                    + "; ".join(f"[{i}] {s.label}" for i, s in enumerate(fitted.sources, 1))
                )
        if done is not None:
            finish_turn(
                store,
                turn,
                done.text,
                model=lm.name,
                stats=stats,
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


def _configured_engine(args: argparse.Namespace) -> str:
    """--engine wins; without it, config.toml's engine (auto if unset). A bad config file is a
    one-line ConfigError."""
    if getattr(args, "engine", None):
        return str(args.engine)
    from samchat.chat.config import load_config

    return load_config().engine


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
