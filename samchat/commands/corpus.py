"""`samchat corpus list|add|remove`: corpus packs that ship with samchat."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from samchat.commands._support import (
    add_data_dir,
    add_model,
    err_console,
    open_store,
    out_console,
)
from samchat.commands.import_ import import_and_index
from samchat.corpus.indexing import drop_from_indexes
from samchat.corpus.packs import pack, packs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("corpus", help="bundled corpus packs: list | add NAME | remove NAME")
    p.add_argument("action", choices=("list", "add", "remove"))
    p.add_argument("name", nargs="?", help="pack name (for add and remove)")
    p.add_argument("--no-index", action="store_true", help="store only; do not index")
    p.add_argument("--json", action="store_true", help="list: print a JSON list")
    add_data_dir(p)
    add_model(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.name:
        from samchat.errors import SamchatError

        raise SamchatError(f"`samchat corpus {args.action}` needs a pack name; see `corpus list`")
    with open_store(args) as store:
        if args.action == "list":
            installed = store.corpora()
            if args.json:
                rows = [
                    {
                        "name": p.name,
                        "installed": bool(installed.get(p.name, 0)),
                        "documents": installed.get(p.name, 0),
                        "files": len(p.files),
                        "license": p.license,
                        "description": p.description,
                    }
                    for p in packs()
                ]
                print(json.dumps(rows, indent=1))
                return 0
            table = Table(box=None, pad_edge=False)
            for col in ("name", "installed", "files", "license", "description"):
                table.add_column(col)
            for p in packs():
                have = installed.get(p.name, 0)
                table.add_row(
                    p.name, f"yes ({have} docs)" if have else "no", str(len(p.files)),
                    p.license, p.description,
                )  # fmt: skip
            out_console.print(table)
            return 0
        if args.action == "remove":
            keys = {f"doc:{d.id}" for d in store.documents(corpus=args.name)}
            n = store.delete_corpus(args.name)
            drop_from_indexes(store, keys)
            err_console.print(f"removed corpus {args.name}: {n} documents")
            return 0
    chosen = pack(args.name)
    import_and_index(args, list(chosen.files), corpus=chosen.name)
    return 0
