"""`samchat db check|recover|path`: verify the database, salvage a damaged one into a new file,
or say where it is (to open it with sqlite-utils or Datasette)."""

from __future__ import annotations

import argparse

from samchat.commands._support import add_data_dir, err_console, out_console
from samchat.errors import StoreError
from samchat.store import Store, deep_check, recover


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "db",
        help="database: check | recover (copy every readable row of a damaged one into a new "
        "file, keeping the damaged one) | path (print its file)",
    )
    p.add_argument("action", choices=("check", "recover", "path"))
    add_data_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import sqlite3

    from samchat.cli_options import store_path
    from samchat.store.connection import translate

    path = store_path(args)
    if args.action == "path":
        print(path.absolute())  # exactly the path, for `sqlite-utils tables "$(samchat db path)"`
        if not path.exists():
            err_console.print("no database there yet: samchat creates it when first used")
        return 0
    if args.action == "check":
        with Store.open(path) as store:
            try:
                verdict = deep_check(store.conn)
            except sqlite3.Error as exc:
                raise translate(exc, path) from exc
            counts = store.counts()
        if verdict != "ok":
            raise StoreError(
                f"the database {path} is damaged ({verdict}); `samchat db recover` copies every "
                "readable row into a new database and keeps the damaged file"
            )
        out_console.print(
            f"{path}: ok ({counts['chats']} chats, {counts['messages']} messages, "
            f"{counts['documents']} documents)"
        )
        return 0
    result = recover(path)  # drops index/ next to it (see corpus.indexing.index_root)
    if not result.readable:
        err_console.print(f"nothing in {result.moved_to} could be read; started a new database")
    else:
        err_console.print(f"{result.summary()}; the damaged file is kept at {result.moved_to}")
    if result.index_dropped is not None:
        err_console.print("the static index is rebuilt from the recovered database on next use")
    return 0
