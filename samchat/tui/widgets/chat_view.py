"""The scrolling chat: only the most recent messages are mounted, older ones on request.

Long chats (thousands of messages) stay responsive because at most `page` MessageViews are
mounted at first; "load earlier" mounts another page above.
"""

from __future__ import annotations

from typing import Any

from textual.containers import VerticalScroll
from textual.widgets import Button

from samchat.chat.shown_stats import ShownStats
from samchat.tui.widgets.message_view import MessageView

PAGE = 30  # a few screens of messages; more on request


class ChatView(VerticalScroll):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[Any] = []  # the whole thread (MessageRow), root first
        self.branches: dict[int, tuple[int, int]] = {}
        self.first_mounted = 0  # index into rows of the oldest mounted message
        self.page = PAGE

    def make_view(self, row: Any) -> MessageView:
        return MessageView(
            message_id=row.id,
            parent_id=row.parent_id,
            role=row.role,
            content=row.content,
            model=row.model,
            stats=ShownStats.parse(row.stats),
            branch=self.branches.get(row.id, (1, 1)),
        )

    async def show_thread(self, rows: list[Any], branches: dict[int, tuple[int, int]]) -> None:
        self.rows = list(rows)
        self.branches = branches
        await self.remove_children()
        self.first_mounted = max(0, len(self.rows) - self.page)
        views = [self.make_view(r) for r in self.rows[self.first_mounted :]]
        if self.first_mounted:
            await self.mount(self._more_button())
        if views:
            await self.mount_all(views)
        self.anchor()
        self.scroll_end(animate=False)

    def _more_button(self) -> Button:
        return Button(
            f"▲ {self.first_mounted} earlier messages (load more)",
            id="load-earlier",
            classes="load-earlier",
        )

    async def load_earlier(self) -> int:
        """Mount the previous page above; returns how many were added."""
        if not self.first_mounted:
            return 0
        start = max(0, self.first_mounted - self.page)
        views = [self.make_view(r) for r in self.rows[start : self.first_mounted]]
        old_button = self.query("#load-earlier")
        await old_button.remove()
        first = self.query(MessageView).first() if self.query(MessageView) else None
        await self.mount_all(views, before=first) if first else await self.mount_all(views)
        self.first_mounted = start
        if start:
            await self.mount(self._more_button(), before=views[0])
        return len(views)

    async def add_view(self, view: MessageView, row: Any | None = None) -> None:
        if row is not None:
            self.rows.append(row)
        await self.mount(view)
        self.anchor()
        self.scroll_end(animate=False)

    def show_branches(self, branches: dict[int, tuple[int, int]]) -> None:
        """Each message's (n, of) among its siblings, after a reply joined the thread."""
        self.branches = branches
        for view in self.views():
            if view.message_id is not None:
                view.show_branch(branches.get(view.message_id, (1, 1)))

    def views(self) -> list[MessageView]:
        return list(self.query(MessageView))

    def last_view(self, role: str | None = None) -> MessageView | None:
        for view in reversed(self.views()):
            if role is None or view.role == role:
                return view
        return None
