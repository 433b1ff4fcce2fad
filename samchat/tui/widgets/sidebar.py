"""The sidebar: a full-text search box over a list of chats (newest first) or search hits,
read from the store the host has open."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option, OptionDoesNotExist

from samchat.errors import SamchatError

if TYPE_CHECKING:
    from samchat.tui.host import ChatHost


MARK_OPEN, MARK_CLOSE = "\x02", "\x03"  # the marks asked of Store.search around each hit
MARKS = (MARK_OPEN, MARK_CLOSE)
CHATS_LISTED = 500  # the most recent chats the list shows
HITS_LISTED = 50  # the best search hits the list shows


class Sidebar(Vertical):
    @dataclass
    class ChatChosen(Message):
        chat_id: int
        message_id: int | None  # a search hit opens the branch holding this message

    def __init__(self, host: ChatHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host
        self.current: int | None = None  # the open chat, highlighted in the list

    def compose(self) -> ComposeResult:
        yield Static("Chats", id="sidebar-title")
        yield Input(placeholder="Search (full text)…", id="search")
        yield OptionList(id="chat-list")

    def refresh_chats(self, current: int | None) -> None:
        """The chats, or the hits of the search box's query; `current`: the open chat."""
        self.current = current
        query = self.query_one("#search", Input).value.strip()
        data = self.host.data
        if data is None:
            self.show_chats([], None)
            return
        try:
            if query:
                self.show_hits(
                    data.search(query, limit=HITS_LISTED, kinds=("message",), mark=MARKS)
                )
            else:
                self.show_chats(data.chats(limit=CHATS_LISTED), current)
        except SamchatError as exc:
            self.host.error(exc, "Search" if query else "Database")

    @on(Input.Changed, "#search")
    def _search_changed(self) -> None:
        self.refresh_chats(self.current)

    @on(Input.Submitted, "#search")
    def _search_submitted(self) -> None:
        lst = self.query_one("#chat-list", OptionList)
        lst.focus()
        if lst.highlighted is None and lst.option_count:
            lst.highlighted = 0

    def show_chats(self, chats: list[Any], current: int | None) -> None:
        lst = self.query_one("#chat-list", OptionList)
        lst.clear_options()
        lst.add_options(
            [Option(Content(chat.title or "Untitled"), id=f"chat-{chat.id}") for chat in chats]
        )
        if not chats:
            lst.add_option(Option(Content.from_markup("[dim]no chats yet[/]"), disabled=True))
        self.highlight(current)

    def highlight(self, chat_id: int | None) -> None:
        lst = self.query_one("#chat-list", OptionList)
        if chat_id is None:
            return
        self.current = chat_id
        with contextlib.suppress(OptionDoesNotExist):  # search results are shown
            lst.highlighted = lst.get_option_index(f"chat-{chat_id}")

    def show_hits(self, hits: list[Any]) -> None:
        lst = self.query_one("#chat-list", OptionList)
        lst.clear_options()
        shown = 0
        for n, hit in enumerate(hits):
            if hit.kind != "message" or hit.chat_id is None:
                continue
            snippet = " ".join(hit.snippet.split())
            body = Content.assemble((hit.title or "Untitled", "bold"), "\n", _marked(snippet))
            lst.add_option(Option(body, id=f"hit-{n}-{hit.chat_id}-{hit.id}"))
            shown += 1
        if not shown:
            lst.add_option(Option(Content.from_markup("[dim]no matches[/]"), disabled=True))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        option_id = event.option.id or ""
        if option_id.startswith("chat-"):
            self.post_message(self.ChatChosen(int(option_id[5:]), None))
        elif option_id.startswith("hit-"):
            _, _, chat_id, message_id = option_id.split("-")
            self.post_message(self.ChatChosen(int(chat_id), int(message_id)))


def _marked(snippet: str) -> Content:
    parts: list[str | tuple[str, str]] = []
    rest = snippet
    while MARK_OPEN in rest:
        before, _, after = rest.partition(MARK_OPEN)
        hit, _, rest = after.partition(MARK_CLOSE)
        parts.append(before)
        parts.append((hit, "bold $accent"))
    parts.append(rest)
    return Content.assemble(*parts)
