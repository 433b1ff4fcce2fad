"""`samchat models [--json]`: the models already on this machine, and what --model takes."""

from __future__ import annotations

import argparse
import json
import sys

from rich.table import Table

from samchat.cli_options import apply_data_dir
from samchat.commands._support import add_data_dir, out_console
from samchat.models.catalog import list_models, recent_file
from samchat.remote import REMOTE


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def run(args: argparse.Namespace) -> int:
    from samchat.chat.config import ConfigError, load_config

    entries = list_models(recent_file(apply_data_dir(args)))
    try:
        endpoints = load_config().endpoints
    except ConfigError as exc:  # the local models are listed all the same
        print(f"[{exc}; endpoints not listed]", file=sys.stderr)
        endpoints = {}
    if endpoints:
        from samchat.remote.client import endpoint_models

        remote, problems = endpoint_models(endpoints)
        entries += remote
        for problem in problems:
            print(f"[{problem}]", file=sys.stderr)
    if args.json:
        print(json.dumps([e.to_dict() for e in entries], indent=1))
        return 0
    table = Table(box=None, pad_edge=False)
    for column in ("--model", "from", "format", "size"):
        table.add_column(column, overflow="fold")
    table.add_column("path", overflow="fold")
    for e in entries:
        size = "" if e.format == REMOTE else _size(e.size)
        table.add_row(e.source or "(default)", e.origin, e.format, size, e.path)
    out_console.print(table)
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "models",
        help="list models: Hugging Face cache, Ollama, LM Studio, GGUF files used before, and "
        "those of the endpoints in config.toml",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    add_data_dir(p)  # GGUF files loaded before are remembered there
    p.set_defaults(func=run)
