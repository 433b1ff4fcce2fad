"""The scrolling chat: only the most recent messages are mounted, older ones on request, and
what is done to the messages shown (choosing one, copying it or its code, stepping through).

Long chats (thousands of messages) stay responsive because at most `page` MessageViews are
mounted at first; "load earlier" mounts another page above.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual import on
from textual.containers import VerticalScroll
from textual.widgets import Button

from samchat.tui.code_blocks import code_blocks
from samchat.tui.screens.dialogs import PickScreen
from samchat.tui.widgets.message_view import MessageView

if TYPE_CHECKING:
    from samchat.store import MessageRow

PAGE = 30  # a few screens of messages; more on request


class ChatView(VerticalScroll):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[MessageRow] = []  # the whole thread, root first
        self.branches: dict[int, tuple[int, int]] = {}
        self.first_mounted = 0  # index into rows of the oldest mounted message
        self.page = PAGE

    def make_view(self, row: MessageRow) -> MessageView:
        return MessageView(
            message_id=row.id,
            parent_id=row.parent_id,
            role=row.role,
            content=row.content,
            model=row.model,
            stats=row.stats,
            branch=self.branches.get(row.id, (1, 1)),
        )

    async def show_thread(
        self, rows: list[MessageRow], branches: dict[int, tuple[int, int]]
    ) -> None:
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

    async def add_view(self, view: MessageView, row: MessageRow | None = None) -> None:
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

    @on(Button.Pressed, "#load-earlier")
    async def _load_earlier_pressed(self) -> None:
        await self.load_earlier()

    # -- what is done to the messages shown ----------------------------------------------------

    def target_view(self, role: str | None = None) -> MessageView | None:
        """The focused message if it fits, else the newest message of `role`."""
        focused = self.screen.focused
        if isinstance(focused, MessageView) and (role is None or focused.role == role):
            return focused
        return self.last_view(role)

    def copy_message(self) -> None:
        view = self.target_view()
        if view is None or not view.content:
            self.notify("no message to copy", severity="warning")
            return
        self.app.copy_to_clipboard(view.content)
        self.notify(f"copied {len(view.content)} characters", timeout=2)

    def copy_code(self) -> None:
        """The focused message's code block, else the newest message's; asks which of several."""
        focused = self.screen.focused
        views = [focused] if isinstance(focused, MessageView) else []
        views += list(reversed(self.views()))
        for view in views:
            blocks = code_blocks(view.content)
            if not blocks:
                continue
            if len(blocks) == 1:
                self._copy_block(blocks[0])
                return

            def chosen(index: int | None, blocks: list[str] = blocks) -> None:
                if index is not None:
                    self._copy_block(blocks[index])

            labels = [
                f"{i + 1}: {b.splitlines()[0] if b.strip() else '(empty)'}"[:70]
                for i, b in enumerate(blocks)
            ]
            self.app.push_screen(PickScreen("Copy which code block?", labels), chosen)
            return
        self.notify("no code block to copy", severity="warning")

    def _copy_block(self, block: str) -> None:
        self.app.copy_to_clipboard(block)
        self.notify(f"copied a code block ({len(block.splitlines())} lines)", timeout=2)

    async def step_message(self, step: int) -> bool:
        """Focus the previous (-1) or next (1) message; False past the newest one."""
        views = self.views()
        if not views:
            return True
        focused = self.screen.focused
        if not isinstance(focused, MessageView) or focused not in views:
            index = len(views) if step < 0 else -1  # from the prompt: start at the newest
        else:
            index = views.index(focused)
        target = index + step
        if target < 0:
            if await self.load_earlier():
                views = self.views()
                target = views.index(focused) - 1 if isinstance(focused, MessageView) else 0
            else:
                target = 0
        if target >= len(views):
            return False
        views[target].focus()
        views[target].scroll_visible(animate=False)
        return True

    async def load_earlier_or_say(self) -> None:
        """The load-earlier action: another page, or a notice that this is the start."""
        if not await self.load_earlier():
            self.notify("this is the start of the chat", timeout=2)

    def focus_message(self, message_id: int) -> None:
        for view in self.views():
            if view.message_id == message_id:
                view.focus()
                view.scroll_visible(animate=False)
                return
