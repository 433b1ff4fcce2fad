"""`samchat index status|rebuild`: the static drafting index of the current tokenizer."""

from __future__ import annotations

import argparse
import json

from samchat.commands._support import (
    add_data_dir,
    add_model,
    open_index,
    open_store,
    out_console,
    progress_bar,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("index", help="static drafting index: status | rebuild | compact")
    p.add_argument(
        "action",
        choices=("status", "rebuild", "compact"),
        help="status: sync with the database and report; rebuild: from scratch; "
        "compact: merge segments and drop deleted text",
    )
    p.add_argument("--json", action="store_true", help="print the status as one JSON object")
    add_data_dir(p)
    add_model(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        manager = open_index(store, args)
        with progress_bar("rebuilding" if args.action == "rebuild" else "syncing") as update:
            result = manager.rebuild(update) if args.action == "rebuild" else manager.open(update)
        if args.action == "compact":
            manager.compact()
        status = manager.status()
        counts = store.counts()
        manager.close()
    if args.json:
        report = {
            **status,
            "database": {"documents": counts["documents"], "messages": counts["messages"]},
            "rebuilt": result.rebuilt,
            "synced": {
                "added": result.added,
                "removed": result.removed,
                "tokens": result.tokens,
                "seconds": result.seconds,
            },
        }
        print(json.dumps(report, indent=1, default=str))
        return 0
    tokens = float(status.get("tokens", 0))
    size = float(status.get("bytes", 0))
    if result.rebuilt and args.action == "status":
        out_console.print("the index was unreadable and has been rebuilt from the database")
    out_console.print(f"index      {status['directory']}")
    out_console.print(f"tokenizer  {status['fingerprint']}")
    out_console.print(
        f"holds      {status.get('documents', 0)} items ({counts['documents']} documents, "
        f"{counts['messages']} chat messages in the database)"
    )
    per = f" ({size / tokens:.1f} bytes/token)" if tokens else ""
    out_console.print(f"size       {tokens:,.0f} tokens, {size / 2**20:.2f} MiB{per}")
    out_console.print(f"segments   {status.get('segments', 0)}")
    if result.added or result.removed:
        out_console.print(
            f"synced     +{result.added} / -{result.removed} items, {result.tokens:,} tokens "
            f"in {result.seconds:.2f}s"
        )
    return 0
