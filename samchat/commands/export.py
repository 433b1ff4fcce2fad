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
        figures = m.stats.reply if m.stats is not None else None
        if m.role == "assistant" and figures is not None and figures.tokens:
            stats = f"{figures.tokens} tokens"
            if figures.tokens_per_s:
                stats += f", {figures.tokens_per_s:.1f} tokens/s"
            if figures.mat:
                stats += f", MAT {figures.mat:.2f}"
            lines += [f"*{stats}*", ""]
    return "\n".join(lines)


def _message_json(m: MessageRow) -> dict[str, object]:
    """A message as the export has always written it: its row, the main figures beside the
    whole record."""
    fig = m.stats.reply if m.stats is not None else None
    return {
        "id": m.id,
        "chat_id": m.chat_id,
        "parent_id": m.parent_id,
        "role": m.role,
        "content": m.content,
        "model": m.model,
        "created_at": m.created_at,
        "tokens": fig.tokens if fig else None,
        "seconds": fig.seconds if fig else None,
        "tokens_per_s": fig.tokens_per_s if fig else None,
        "steps": fig.steps if fig else None,
        "mat": fig.mat if fig else None,
        "speedup": fig.speedup_est if fig else None,
        "accepted_by_drafter": dict(fig.accepted_by_drafter) if fig else {},
        "finish_reason": m.finish_reason,
        "stats": m.stats.to_dict() if m.stats is not None else {},
    }


def to_json(store: Store, chat: Chat) -> str:
    """Every message of every branch (parent_id links them), with its statistics."""
    data = dict(chat.__dict__)
    data["thread"] = [m.id for m in store.thread(chat.id)]
    data["messages"] = [_message_json(m) for m in store.messages(chat.id)]
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
