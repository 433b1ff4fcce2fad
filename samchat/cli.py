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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="samchat",
        description="Chat with a local LLM, sped up losslessly by suffix-automaton drafting.",
    )
    parser.add_argument("--version", action="version", version=f"samchat {__version__}")
    # The TUI (no sub-command) takes the same model and data options as the commands.
    add_model_options(parser)
    add_data_dir_option(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = sub.add_parser("bench", help="benchmarks (index, decode)")
    bench_sub = bench.add_subparsers(dest="bench", metavar="BENCH", required=True)
    for info in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands_pkg.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
        if hasattr(module, "register_bench"):
            module.register_bench(bench_sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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
