"""`samchat rm CHAT…`: delete chats (or documents) and drop them from drafting."""

from __future__ import annotations

import argparse

from samchat.commands._support import add_data_dir, confirm, err_console, open_store
from samchat.corpus.indexing import drop_from_indexes
from samchat.errors import SamchatError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("rm", help="delete chats (asks first unless --yes)")
    p.add_argument("ids", nargs="+", type=int, metavar="CHAT", help="chat ids (see history)")
    p.add_argument("--document", action="store_true", help="the ids are document ids")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    add_data_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if args.document:
            names = [f"document {i} ({store.document(i).title})" for i in args.ids]
        else:
            names = [f"chat {i} ({store.chat(i).title})" for i in args.ids]
        if not args.yes and not confirm(f"delete {', '.join(names)}?"):
            raise SamchatError("nothing deleted: confirm at the prompt, or pass --yes")
        keys: set[str] = set()
        for i in args.ids:
            if args.document:
                store.delete_document(i)
                keys.add(f"doc:{i}")
            else:
                keys |= {f"msg:{m.id}" for m in store.messages(i)}
                store.delete_chat(i)
        drop_from_indexes(store, keys)
    for name in names:
        err_console.print(f"deleted {name}")
    return 0
