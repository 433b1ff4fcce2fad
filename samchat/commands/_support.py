"""Pieces the store and corpus commands share: options, opening things, progress bars.

The leading underscore keeps samchat/cli.py from taking it for a sub-command. It lives here, not
in samchat.corpus, because it uses rich and argparse, which the libraries never import.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from samchat.cli_options import add_data_dir_option
from samchat.corpus.indexing import IndexManager, tokenizer_codec
from samchat.store import Store

err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)


# One --data-dir option for every command (SUPPRESS default: `samchat --data-dir X cmd` works).
add_data_dir = add_data_dir_option


def add_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default=argparse.SUPPRESS,
        help="whose tokenizer keys the static index (default: the bundled model)",
    )


def open_store(args: argparse.Namespace) -> Store:
    from samchat.cli_options import store_path

    return Store.open(store_path(args))  # --data-dir also when given after the sub-command


def open_index(store: Store, args: argparse.Namespace) -> IndexManager:
    """The index manager for the tokenizer of --model (loads the tokenizer only)."""
    from samchat.cli_options import spec_from_args
    from samchat.models.loader import load_tokenizer

    spec = spec_from_args(args)
    tokenizer, fingerprint = load_tokenizer(spec)
    encode, separator = tokenizer_codec(tokenizer)
    return IndexManager(store, fingerprint, encode, separator, model=spec.source or "default")


@contextmanager
def progress_bar(description: str) -> Iterator[Callable[[int, int, object], None]]:
    """A rich progress bar on stderr; yields a (done, total, what) callback. Without a
    terminal (scripts, logs, tests) it stays silent: the summary lines say what happened."""
    if not err_console.is_terminal:
        yield lambda done, total, what: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[what]}", style="dim"),
    )
    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task(description, total=None, what="")

        def update(done: int, total: int, what: object) -> None:
            label = str(what)
            bar.update(task, completed=done, total=total, what=label[-40:])

        yield update


def confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")
