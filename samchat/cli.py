"""The `samchat` command line. Sub-commands live in samchat/commands/ and are discovered."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

from samchat import __version__, interrupts
from samchat import commands as commands_pkg
from samchat.cli_options import add_data_dir_option, add_model_options
from samchat.errors import SamchatError
from samchat.interrupts import EXIT_INTERRUPTED

EXIT_OK = 0
EXIT_ERROR = 1  # a SamchatError (bad input, missing model, corrupt file) or a bug
EXIT_USAGE = 2  # argparse's exit status for a bad command line; an unknown command too


def command_names() -> set[str]:
    """Sub-command names, from module names alone (import_ -> import; bench_* -> bench)."""
    names = {"bench"}
    for info in pkgutil.iter_modules(commands_pkg.__path__):
        if not info.name.startswith(("_", "bench_")):
            names.add(info.name.rstrip("_"))
    return names


def wants_app(argv: Sequence[str]) -> bool:
    """No sub-command and no help: the app starts, so no command module needs importing
    (several pull in sqlite-utils, numpy or rich; the TUI must be up in well under a second)."""
    names = command_names() | {"-h", "--help", "--version"}
    return not any(arg in names for arg in argv)


def build_parser(with_commands: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="samchat",
        description="Chat with a local LLM, sped up losslessly by suffix-automaton drafting.",
    )
    parser.add_argument("--version", action="version", version=f"samchat {__version__}")
    # The TUI (no sub-command) takes the same model and data options as the commands.
    add_model_options(parser)
    add_data_dir_option(parser)
    if not with_commands:
        parser.set_defaults(command=None)
        return parser
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = sub.add_parser("bench", help="benchmarks (index, decode, ttft, latency, perplexity)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for info in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):  # helpers (_support): no sub-command, nothing to import
            continue
        module = importlib.import_module(f"{commands_pkg.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
        if hasattr(module, "register_bench"):
            module.register_bench(bench_sub)
    return parser


class _Probe(argparse.ArgumentParser):
    """Parses the global options quietly: the real parser reports what is wrong."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)


def unknown_command(argv: Sequence[str]) -> str | None:
    """The first word that is neither an option (or its value) nor a sub-command, if any."""
    probe = _Probe(add_help=False, exit_on_error=False)
    add_model_options(probe)
    add_data_dir_option(probe)
    try:
        _, rest = probe.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return None  # a bad option value: the real parser says so
    first = next((arg for arg in rest if not arg.startswith("-")), None)
    if first is None or first in command_names():
        return None
    return first


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever sys.stderr is when a message comes (tests swap it). Warnings go
    through it too: with a handler here, logging's last-resort one no longer says them."""

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


class _LevelFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        return text if record.levelno <= logging.INFO else f"{record.levelname.lower()}: {text}"


def _report_progress_lines() -> None:
    """Libraries log the rare slow first-time steps (measuring the verification cost curve) at
    INFO; a command shows them on stderr. (The app does not: the terminal is its screen.)"""
    logger = logging.getLogger("samchat.engines.costs")
    if any(h.get_name() == "samchat-cli" for h in logger.handlers):
        return  # main() ran before in this process (tests)
    handler = _StderrHandler()
    handler.set_name("samchat-cli")
    handler.setFormatter(_LevelFormatter())
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 done, 1 an error (one `error:` line), 2 a usage error (argparse, or an
    unknown command), 130 interrupted (Ctrl-C)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        unknown = unknown_command(argv)
        if unknown is not None:
            valid = ", ".join(sorted(command_names()))
            print(f"error: unknown command {unknown!r}; valid commands: {valid}", file=sys.stderr)
            return EXIT_USAGE
        parser = build_parser(with_commands=not wants_app(argv))
        args = parser.parse_args(argv)
        if args.command is None:
            from samchat.tui.launch import run_tui

            # The app reads Ctrl-C as a key; a forced exit would leave the terminal in the
            # app's mode. Quitting is at once: a reply or timing still in a C call is not
            # waited for (what the app saved is committed; the reply in progress is cancelled).
            interrupts.uninstall()
            code = run_tui(args)
            interrupts.exit_promptly()
            return code
        _report_progress_lines()
        result: int = args.func(args)
        return result
    except SamchatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        interrupts.say_cancelled()
        return EXIT_INTERRUPTED
    except ModuleNotFoundError as exc:  # a broken install, not a bug in samchat
        if os.environ.get("SAMCHAT_DEBUG"):
            raise
        missing = (exc.name or str(exc)).split(".")[0]
        print(
            f"error: the Python package {missing!r} that samchat needs is not installed; "
            "reinstall samchat (`make setup` in a checkout, or pip install --upgrade samchat)",
            file=sys.stderr,
        )
        return EXIT_ERROR
    except Exception as exc:  # a bug: still one line for the user, the traceback on request
        if os.environ.get("SAMCHAT_DEBUG"):
            raise
        print(
            f"error: unexpected {type(exc).__name__}: {exc} "
            "(a bug; rerun with SAMCHAT_DEBUG=1 for details and report it)",
            file=sys.stderr,
        )
        return EXIT_ERROR


if __name__ == "__main__":
    from samchat.entry import run

    run()
