"""`samchat db check|recover|path`: verify the database, move a corrupt one aside, or say where
it is (to open it with sqlite-utils or Datasette)."""

from __future__ import annotations

import argparse

from samchat.commands._support import add_data_dir, err_console, out_console
from samchat.errors import SamchatError
from samchat.store import Store, default_path, recover


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "db", help="database: check | recover (move a corrupt one aside) | path (print its file)"
    )
    p.add_argument("action", choices=("check", "recover", "path"))
    add_data_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat.cli_options import apply_data_dir

    apply_data_dir(args)
    path = default_path()
    if args.action == "path":
        print(path.absolute())  # exactly the path, for `sqlite-utils tables "$(samchat db path)"`
        if not path.exists():
            err_console.print("no database there yet: samchat creates it when first used")
        return 0
    if args.action == "check":
        with Store.open(path) as store:
            verdict = store.integrity_check()
            counts = store.counts()
        if verdict != "ok":
            raise SamchatError(
                f"the database {path} is damaged ({verdict}); `samchat db recover` moves it "
                "aside and saves what it can"
            )
        out_console.print(
            f"{path}: ok ({counts['chats']} chats, {counts['messages']} messages, "
            f"{counts['documents']} documents)"
        )
        return 0
    result = recover(path)
    saved = ", ".join(f"{n} {table}" for table, n in result.salvaged.items())
    err_console.print(f"moved the damaged database to {result.moved_to}")
    err_console.print(f"started a fresh database at {path}; saved {saved}")
    return 0
