"""`samchat search QUERY`: full-text search over chats and documents, with snippets."""

from __future__ import annotations

import argparse
import json

from rich.markup import escape

from samchat.commands._support import add_data_dir, err_console, open_store, out_console

_OPEN, _CLOSE = "\x02", "\x03"  # marks that cannot occur in text, replaced by styling


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("search", help="full-text search in chats and documents")
    p.add_argument("query", nargs="+", help="words to find (all of them)")
    p.add_argument("-n", "--limit", type=int, default=20, help="how many hits (default: 20)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--chats", action="store_true", help="only chat messages")
    where.add_argument("--docs", action="store_true", help="only documents")
    p.add_argument(
        "--raw", action="store_true", help='FTS5 query syntax (AND, OR, NOT, "phrase", pre*)'
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_data_dir(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    kinds = ("message",) if args.chats else ("document",) if args.docs else ("message", "document")
    query = " ".join(args.query)
    with open_store(args) as store:
        if args.json:
            hits = store.search(query, args.limit, kinds=kinds, mark=("", ""), raw=args.raw)
            print(json.dumps([h.__dict__ for h in hits], indent=2))
            return 0
        hits = store.search(query, args.limit, kinds=kinds, mark=(_OPEN, _CLOSE), raw=args.raw)
    if not hits:
        err_console.print(f"no matches for {escape(query)}")
        return 1
    for h in hits:
        if h.kind == "message":
            where = f"chat {h.chat_id} · {escape(h.title)} · {h.role} (message {h.id})"
        else:
            where = f"document {h.id} · {escape(h.title)} · {escape(h.source or '')}"
        snippet = " ".join(escape(h.snippet).split())
        snippet = snippet.replace(_OPEN, "[bold yellow]").replace(_CLOSE, "[/]")
        out_console.print(f"[cyan]{where}[/]\n  {snippet}")
    return 0
