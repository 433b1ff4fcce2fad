"""`samchat ask "…"`: stream one answer to stdout (headless chat)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from samchat import interrupts
from samchat.cli_options import (
    add_data_dir_option,
    add_model_options,
    spec_from_args,
    store_path,
)
from samchat.decoding.knobs import Knob, KnobError, KnobValue, from_mapping, knob_of, to_mapping
from samchat.decoding.params import DecodingConfig, SamplingParams
from samchat.errors import SamchatError
from samchat.interrupts import EXIT_INTERRUPTED
from samchat.remote import REMOTE

if TYPE_CHECKING:
    from samchat.chat.generator import Replies
    from samchat.chat.service import PendingReply, ReplyRecord
    from samchat.corpus.indexing import IndexManager
    from samchat.corpus.retrieval import Source
    from samchat.corpus.rule import RetrievalRule
    from samchat.models.loader import LoadedModel, ModelSpec
    from samchat.remote.client import RemoteModel
    from samchat.remote.endpoint import Endpoint
    from samchat.store import Store

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


def _knob_type(knob: Knob) -> Callable[[str], KnobValue]:
    """An argparse `type`: the option's text parsed and checked by the knob's rules."""

    def parse(text: str) -> KnobValue:
        try:
            return knob.parse(text)
        except KnobError as exc:
            raise argparse.ArgumentTypeError(exc.problem) from None

    parse.__name__ = knob.name  # argparse names it in "invalid <name> value"
    return parse


def _add_knob_option(parser: argparse.ArgumentParser, knob: Knob) -> None:
    """Default None: an option not given leaves config.toml's value (see _settings)."""
    flag = "--" + knob.name.replace("_", "-")
    text = knob.help.replace("%", "%%")
    if knob.default not in (None, ()):
        text += f" (default: config.toml's, else {knob.text(knob.default)})"
    if knob.type is tuple:  # one string per use of the option
        element = replace(knob, type=str)
        parser.add_argument(
            flag,
            action="append",
            type=_knob_type(element),
            default=None,
            help=f"{text} (repeatable)",
        )
    elif knob.choices:
        parser.add_argument(flag, choices=knob.choices, default=None, help=text)
    else:
        parser.add_argument(flag, type=_knob_type(knob), default=None, help=text)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        "--json",
        action="store_true",
        help="print one JSON object: chat_id, question_id, reply_id (null when not saved), "
        "text, finish_reason, stats, provenance (characters per drafter), sources",
    )
    parser.add_argument("--system", default=None, help="system prompt")
    for cls, name in KNOB_OPTIONS:
        _add_knob_option(parser, knob_of(cls, name))
    parser.add_argument("--stats", action="store_true", help="print decoding statistics")
    parser.add_argument("--no-save", action="store_true", help="do not save this chat")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--chat", type=int, default=None, help="continue the chat with this id")
    which.add_argument(
        "-c",
        "--continue",
        dest="continue_chat",
        action="store_true",
        help="continue the most recent chat (its history is the question's context)",
    )
    add_model_options(parser)
    # -m: short for --model (unless the shared model options come to declare it themselves).
    with contextlib.suppress(argparse.ArgumentError):
        parser.add_argument("-m", dest="model", default=argparse.SUPPRESS, help="same as --model")
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


def _sources(
    args: argparse.Namespace, question: str, store: Store, rule: RetrievalRule
) -> tuple[list[Source], list[Source]]:
    """(piped text and attached files, retrieved passages); every one is read (and every bad
    one refused) before the model loads or anything is saved."""
    from samchat.corpus.retrieval import read_attachment, retrieve, text_source

    given: list[Source] = []
    if args.prompt != "-" and (piped := _piped_stdin()) is not None:
        given.append(text_source(piped))
    given += [read_attachment(path) for path in args.file]
    found: list[Source] = []
    if args.docs:
        found = retrieve(store, question, rule)
        if not found:
            _note("no imported passage matches the question; answering without them")
    return given, found


def _note(text: str) -> None:
    print(f"[{text}]", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    from samchat import paths
    from samchat.chat.generator import FixedIndex, make_generator
    from samchat.chat.opening import open_model
    from samchat.chat.service import ChatService
    from samchat.corpus.retrieval import within
    from samchat.models.catalog import recent_file
    from samchat.store import Store
    from samchat.store.titles import chat_title

    question = _read_prompt(args.prompt)
    settings = _settings(args)  # a bad config.toml fails here, before anything else
    with Store.open(store_path(args)) as store:
        service = ChatService(store, save=not args.no_save)
        # The chat so far (a missing --chat, or -c with no chat yet, fails here), then the
        # sources: all before the model loads.
        chat_id = args.chat
        if args.continue_chat and (chat_id := service.most_recent_chat()) is None:
            raise SamchatError("there is no chat to continue yet; ask without -c to start one")
        parent_id = service.latest_leaf(chat_id) if chat_id is not None else None
        history = service.history(chat_id, parent_id, args.system)
        given, found = _sources(args, question, store, settings.documents)
        lm = open_model(settings.spec, _note, settings.endpoints, recent_file(store.path.parent))
        # What this machine reads of them within [documents] wait, at the model's measured speed.
        limit = settings.documents.token_limit(store.prefill_speed(lm.name))
        sources = given + within(found, limit)
        index = _open_index(store, lm) if lm.tokenizer is not None else None
        try:
            view = FixedIndex(index.index) if index is not None else None
            generator = make_generator(
                lm, settings.decoding, view, cache_dir=paths.cache_dir(), measure_first=False
            )
            # As many sources as the context holds beside the chat so far.
            fitted = generator.fit_sources(history, question, sources, settings.sampling)
            for notice in fitted.notices:
                _note(notice)
            # The question is committed before decoding, the reply after it.
            reply = service.send(
                question,
                content=fitted.content,
                chat_id=chat_id,
                parent_id=parent_id,
                model=lm.name,
                system=args.system,
                sources=[s.ref() for s in fitted.sources],
                title=chat_title(question),
            )
            record = _stream(args, generator, reply, settings.sampling)
            if record.notice:
                _note(record.notice)
            reply_id = service.finish(reply, record)  # a cancelled reply is kept as it stands
            if interrupts.interrupted():
                saved = f"the partial reply is saved in chat {reply.chat_id}"
                interrupts.say_cancelled(saved if reply_id is not None else "")
                return EXIT_INTERRUPTED
            if index is not None:
                index.sync()  # the finished turn grows the static index
        finally:
            if index is not None:
                index.close()
        if args.json:
            print(json.dumps(_answer(reply, reply_id, record)))
        elif fitted.sources:
            _note(
                "sources: " + "; ".join(f"[{i}] {s.label}" for i, s in enumerate(fitted.sources, 1))
            )
        if reply_id is not None:
            print(f"[saved as chat {reply.chat_id}]", file=sys.stderr)
    if args.stats:
        _print_stats(record)
    if generator.curve_missing():
        return _time_machine(generator)
    return 0


def _time_machine(generator: Replies) -> int:
    """After the first answer with a model, time this machine once so that later replies
    draft; the answer is already out and saved, so Ctrl-C only skips it (exit 130)."""
    _note("timing drafts on this CPU once, so that later replies draft (Ctrl-C skips)")
    try:
        generator.measure_cost_curve()
    except KeyboardInterrupt:
        interrupts.say_cancelled("timing skipped; the next reply times it")
        return EXIT_INTERRUPTED
    return 0


class _Reading:
    """What a long prompt's reading shows on stderr: on a terminal one line rewritten in place
    ("[reading 1,528 tokens of the prompt… 34%]"), elsewhere its first line only."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.shown = False
        self.open = False  # a line without its newline yet

    def update(self, done: int, total: int) -> None:
        text = f"[reading {total:,} tokens of the prompt… {100 * done // max(total, 1)}%]"
        if self.tty:
            sys.stderr.write("\r" + text)
            sys.stderr.flush()
            self.open = True
        elif not self.shown:
            print(f"[reading {total:,} tokens of the prompt…]", file=sys.stderr)
        self.shown = True

    def end(self) -> None:
        if self.open:
            sys.stderr.write("\r\033[K")  # the line goes: the answer starts where it was
            sys.stderr.flush()
            self.open = False


def _stream(
    args: argparse.Namespace, generator: Replies, reply: PendingReply, sampling: SamplingParams
) -> ReplyRecord:
    """The reply streamed to stdout (unless --json), and its ReplyRecord. Ctrl-C sets the
    reply's cancel event (samchat.interrupts): the engine, or the remote read, stops at its
    next step and the record says "cancelled"."""
    from samchat.chat.service import ReplyRecord, stream_reply
    from samchat.decoding import PrefillProgress, TextDelta

    cancel = threading.Event()
    reading = _Reading()
    with interrupts.cancel_on_interrupt(cancel):
        for event in stream_reply(generator, reply, sampling, cancel):
            if isinstance(event, PrefillProgress):
                reading.update(event.done, event.total)
                continue
            reading.end()
            if isinstance(event, ReplyRecord):
                if not args.json:
                    sys.stdout.write("\n")
                    sys.stdout.flush()
                return event
            if isinstance(event, TextDelta) and not args.json:
                sys.stdout.write(event.text)
                sys.stdout.flush()
    raise SamchatError("the decoder stopped without finishing the reply")


def _answer(reply: PendingReply, reply_id: int | None, record: ReplyRecord) -> dict[str, object]:
    """--json's object: ids (null when not saved), the reply and its record (as stored)."""
    return {
        "chat_id": reply.chat_id,
        "question_id": reply.parent_id,
        "reply_id": reply_id,
        "text": record.text,
        "finish_reason": record.finish_reason,
        "stats": record.stats.to_dict(),
        "provenance": record.stats.provenance_summary(),
        "sources": [s.to_dict() for s in reply.sources],
    }


@dataclass(frozen=True)
class _Settings:
    spec: ModelSpec
    decoding: DecodingConfig
    sampling: SamplingParams
    endpoints: dict[str, Endpoint]
    documents: RetrievalRule


def _settings(args: argparse.Namespace) -> _Settings:
    """config.toml's model, engine, device, [decoding] and [sampling], each overridden by its
    option when given. A bad config file is a one-line ConfigError."""
    from samchat.chat.config import load_config

    cfg = load_config()
    spec = spec_from_args(args, cfg)
    decoding, sampling = to_mapping(cfg.decoding), to_mapping(cfg.sampling)
    for cls, name in KNOB_OPTIONS:
        value = getattr(args, name, None)
        if value is None:
            continue  # not given: config.toml's value (or the knob's default)
        target = decoding if cls is DecodingConfig else sampling
        target[name] = tuple(value) if isinstance(value, list) else value
    return _Settings(
        spec,
        from_mapping(DecodingConfig, decoding),  # a bad option: one line (KnobError)
        from_mapping(SamplingParams, sampling),
        cfg.endpoints,
        cfg.documents,
    )


def _open_index(store: Store, lm: LoadedModel | RemoteModel) -> IndexManager | None:
    """The static index of this model's tokenizer, synced with the store; None if unusable."""
    from samchat.corpus.indexing import IndexManager, tokenizer_codec

    if lm.tokenizer is None:
        return None
    encode, separator = tokenizer_codec(lm.tokenizer)
    manager = IndexManager(store, lm.fingerprint, encode, separator, model=lm.name)
    try:
        manager.open()
    except SamchatError as exc:
        print(f"[static index unavailable: {exc}]", file=sys.stderr)
        return None
    return manager


def _print_stats(record: ReplyRecord) -> None:
    s = record.stats.reply
    if s.method == REMOTE:  # the server decodes: no drafts, MAT or speedup here
        print(
            f"[{s.tokens} tokens in {s.seconds:.2f}s, {s.tokens_per_s:.1f} tok/s, "
            f"first token after {s.ttft_s:.2f}s, remote, {record.finish_reason}]",
            file=sys.stderr,
        )
        return
    by = ", ".join(f"{k} {v}" for k, v in sorted(s.accepted_by_drafter.items()))
    print(
        f"[{s.tokens} tokens in {s.seconds:.2f}s, {s.tokens_per_s:.1f} tok/s, "
        f"MAT {s.mat:.2f}, ~{s.speedup_est:.2f}x vs plain, {record.finish_reason}; {by}]",
        file=sys.stderr,
    )
