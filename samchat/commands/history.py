"""`samchat history`: the saved chats, most recent first."""

from __future__ import annotations

import argparse
import json
import time

from rich.table import Table

from samchat.commands._support import add_data_dir, open_store, out_console


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("history", help="list saved chats, most recent first")
    p.add_argument("-n", "--limit", type=int, default=50, help="how many (default: 50)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_data_dir(p)
    p.set_defaults(func=run)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def run(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        chats = store.chats(limit=args.limit)
    if args.json:
        print(json.dumps([c.__dict__ for c in chats], indent=2))
        return 0
    if not chats:
        out_console.print("no chats yet: start one with `samchat` or `samchat ask`")
        return 0
    table = Table(box=None, pad_edge=False)
    for name, just in (("id", "right"), ("updated", "left"), ("msgs", "right")):
        table.add_column(name, justify=just)  # type: ignore[arg-type]
    table.add_column("title", overflow="ellipsis", no_wrap=True)
    table.add_column("model", style="dim")
    for c in chats:
        table.add_row(str(c.id), _when(c.updated_at), str(c.message_count), c.title, c.model or "")
    out_console.print(table)
    return 0
