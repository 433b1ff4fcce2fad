"""`samchat import PATH…`: documents and ChatGPT exports into the store and the static index."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.markup import escape

from samchat.commands._support import (
    add_data_dir,
    add_model,
    err_console,
    open_index,
    open_store,
    progress_bar,
)
from samchat.corpus.importer import ImportSummary, collect_files, import_paths
from samchat.corpus.indexing import IndexManager, drop_from_indexes
from samchat.corpus.readers import DEFAULT_MAX_BYTES
from samchat.errors import ModelLoadError, SamchatError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "import",
        help="import documents (txt, md, rst, code, HTML, PDF) and ChatGPT conversations.json",
        description="Import files and directories (recursively) into samchat's store and "
        "static drafting index. Duplicates are skipped by content.",
    )
    p.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    p.add_argument(
        "--max-size",
        type=float,
        default=DEFAULT_MAX_BYTES / 2**20,
        metavar="MB",
        help="skip files larger than this (default: %(default).0f MB)",
    )
    p.add_argument(
        "--no-index", action="store_true", help="store only; do not grow the static index"
    )
    add_data_dir(p)
    add_model(p)
    p.set_defaults(func=run)


def print_summary(summary: ImportSummary) -> None:
    for path, reason in summary.skipped:
        err_console.print(f"skipped {escape(str(path))}: {escape(reason)}")
    err_console.print(summary.describe(rates=True))


def import_and_index(
    args: argparse.Namespace, files: list[Path], corpus: str | None = None
) -> ImportSummary:
    """Import `files`, growing the static index of --model's tokenizer as documents commit."""
    with open_store(args) as store:
        manager: IndexManager | None = None
        if not args.no_index:
            try:
                manager = open_index(store, args)
                # Catch up first, so a half-finished earlier import is healed.
                if manager.open().rebuilt:
                    err_console.print(
                        "the static index was unreadable; rebuilt it from the database"
                    )
            except ModelLoadError as exc:
                err_console.print(f"warning: not indexing ({exc})")
                manager = None

        def on_document(doc_id: int, tokens: list[int] | None) -> None:
            if manager is not None and tokens is not None:
                manager.add(f"doc:{doc_id}", tokens)

        with progress_bar("importing") as update:
            summary = import_paths(
                store,
                files,
                encode=manager.encode if manager is not None else None,
                max_bytes=int(getattr(args, "max_size", DEFAULT_MAX_BYTES / 2**20) * 2**20),
                corpus=corpus,
                progress=lambda done, total, path: update(done, total, path.name),
                on_document=on_document,
            )
        print_summary(summary)
        if manager is None and summary.replaced:
            drop_from_indexes(store, {f"doc:{i}" for i in summary.replaced})
        if manager is not None:
            with progress_bar("indexing") as update:
                manager.sync(update)  # imported chats, and anything another process added
            manager.flush()
            stats = manager.index.stats()
            manager.close()
            tokens = float(stats.get("tokens", 0))
            size = float(stats.get("bytes", 0))
            per = f", {size / tokens:.1f} bytes/token" if tokens else ""
            err_console.print(f"static index: {tokens:,.0f} tokens, {size / 2**20:.1f} MiB{per}")
    return summary


def run(args: argparse.Namespace) -> int:
    if args.max_size <= 0:
        raise SamchatError("--max-size must be a positive number of megabytes")
    files = collect_files(args.paths)  # a missing path stops us before anything is written
    summary = import_and_index(args, files)
    if not summary.imported_anything and summary.skipped:
        return 1
    return 0
