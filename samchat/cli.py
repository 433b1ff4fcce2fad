"""The `samchat` command line. Sub-commands live in samchat/commands/ and are discovered."""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

from samchat import __version__
from samchat import commands as commands_pkg
from samchat.cli_options import add_data_dir_option, add_model_options, apply_data_dir
from samchat.errors import SamchatError


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
    bench = sub.add_parser("bench", help="benchmarks (index, decode)")
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(with_commands=not wants_app(argv))
    args = parser.parse_args(argv)
    try:
        apply_data_dir(args)
        if args.command is None:
            from samchat.tui.launch import run_tui

            return run_tui(args)
        result: int = args.func(args)
        return result
    except SamchatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line for the user, the traceback on request
        if os.environ.get("SAMCHAT_DEBUG"):
            raise
        print(
            f"error: unexpected {type(exc).__name__}: {exc} "
            "(a bug; rerun with SAMCHAT_DEBUG=1 for details and report it)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
