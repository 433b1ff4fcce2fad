"""A chat's title: its first question on one line, cut to TITLE_CHARS. The app, `samchat ask` and
the server name new chats alike."""

from __future__ import annotations

TITLE_CHARS = 60


def chat_title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"
