"""The multi-line prompt: enter sends, shift+enter or ctrl+j adds a newline."""

from __future__ import annotations

from dataclasses import dataclass

from textual import events
from textual.message import Message
from textual.widgets import TextArea

NEWLINE_KEYS = ("shift+enter", "ctrl+j", "newline")


class PromptArea(TextArea):
    @dataclass
    class Submitted(Message):
        prompt: PromptArea
        text: str

    def __init__(self, *, id: str | None = None, placeholder: str = "") -> None:
        super().__init__(
            soft_wrap=True,
            show_line_numbers=False,
            tab_behavior="focus",
            highlight_cursor_line=False,
            id=id,
            placeholder=placeholder,
        )

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self, self.text))
            return
        if event.key in NEWLINE_KEYS:
            event.stop()
            event.prevent_default()
            start, end = self.selection
            self._replace_via_keyboard("\n", start, end)
            return
        await super()._on_key(event)
