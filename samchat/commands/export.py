"""`samchat export CHAT --format md|json`: one chat as Markdown or JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from samchat.commands._support import add_data_dir, open_store
from samchat.errors import SamchatError
from samchat.store import Chat, MessageRow, Store


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("export", help="export a chat as Markdown or JSON")
    p.add_argument("chat", type=int, metavar="CHAT", help="chat id (see `samchat history`)")
    p.add_argument("--format", choices=("md", "json"), default="md", help="default: md")
    p.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
    add_data_dir(p)
    p.set_defaults(func=run)


def to_markdown(chat: Chat, thread: list[MessageRow]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(chat.created_at))
    lines = [f"# {chat.title}", "", f"*{when} · {chat.model or 'unknown model'}*", ""]
    if chat.system_prompt:
        lines += ["## System", "", chat.system_prompt, ""]
    for m in thread:
        lines += [f"## {m.role.capitalize()}", "", m.content, ""]
        if m.role == "assistant" and m.tokens:
            stats = f"{m.tokens} tokens"
            if m.tokens_per_s:
                stats += f", {m.tokens_per_s:.1f} tokens/s"
            if m.mat:
                stats += f", MAT {m.mat:.2f}"
            lines += [f"*{stats}*", ""]
    return "\n".join(lines)


def to_json(store: Store, chat: Chat) -> str:
    """Every message of every branch (parent_id links them), with its statistics."""
    data = dict(chat.__dict__)
    data["thread"] = [m.id for m in store.thread(chat.id)]
    data["messages"] = [m.__dict__ for m in store.messages(chat.id)]
    return json.dumps(data, indent=2, ensure_ascii=False)


def run(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        chat = store.chat(args.chat)
        text = (
            to_markdown(chat, store.thread(chat.id))
            if args.format == "md"
            else to_json(store, chat)
        )
    if args.output is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    try:
        args.output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SamchatError(f"cannot write {args.output}: {exc.strerror}") from None
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
