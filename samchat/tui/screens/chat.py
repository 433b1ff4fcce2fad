"""The chat screen: the open chat and every action on its messages (send, regenerate, edit,
switch branches, copy, delete…). Its keys are the app's bindings (`screen.<action>`), so the
keymap, the footer and the command palette stay in one place (samchat/tui/keys.py)."""

from __future__ import annotations

from typing import Any

from textual.widgets import Input

from samchat.chat.documents import import_documents
from samchat.chat.live_stats import LiveStats
from samchat.errors import SamchatError
from samchat.tui.code_blocks import code_blocks
from samchat.tui.guard import guarded
from samchat.tui.screens.chat_turns import ChatTurns
from samchat.tui.screens.dialogs import ConfirmScreen, EditorScreen, InputScreen, PickScreen
from samchat.tui.screens.documents import ChatDocuments, DocumentsScreen
from samchat.tui.screens.import_documents import ImportScreen
from samchat.tui.widgets.message_view import MessageView
from samchat.tui.widgets.stats_bar import StatsBar
from samchat.tui.worker_messages import ReplyJob


class ChatScreen(ChatTurns):
    """The app's default screen."""

    @guarded
    async def action_new_chat(self) -> None:
        await self.open_chat(None)
        self.query_one("#search", Input).value = ""
        self.refresh_sidebar()
        self.prompt.focus()

    @guarded
    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    @guarded
    def action_rename_chat(self) -> None:
        if self.chat_id is None or (data := self.samchat.need_data()) is None:
            self.notify("open a chat first", severity="warning")
            return
        chat_id = self.chat_id

        def done(title: str | None) -> None:
            if not title or not title.strip():
                return
            try:
                data.rename_chat(chat_id, title.strip())
            except SamchatError as exc:
                self.samchat.error(exc, "Rename")
                return
            if self.chat_id == chat_id:
                self.samchat.sub_title = title.strip()
            self.refresh_sidebar()

        self.app.push_screen(InputScreen("Rename chat", data.chat(chat_id).title), done)

    @guarded
    def action_delete_chat(self) -> None:
        if self.chat_id is None or (data := self.samchat.need_data()) is None:
            self.notify("open a chat first", severity="warning")
            return
        if self.busy():
            return
        chat_id = self.chat_id

        async def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                data.delete_chat(chat_id)
            except SamchatError as exc:
                self.samchat.error(exc, "Delete")
                return
            if self.chat_id == chat_id:
                await self.open_chat(None)
            self.refresh_sidebar()
            self.samchat.poke_indexer()
            self.notify("chat deleted", timeout=2)

        title = data.chat(chat_id).title
        self.app.push_screen(
            ConfirmScreen(f"Delete the chat “{title}” and all its messages?"), done
        )

    @guarded
    def action_system_prompt(self) -> None:
        if (data := self.samchat.need_data()) is None:
            return
        try:
            if self.chat_id is None:
                self.chat_id = data.create_chat("New chat", self.samchat.model_name)
                self.refresh_sidebar()
            chat = data.chat(self.chat_id)
        except SamchatError as exc:
            self.samchat.error(exc)
            return

        def done(text: str | None) -> None:
            if text is None:
                return
            try:
                data.set_system_prompt(chat.id, text.strip() or None)
            except SamchatError as exc:
                self.samchat.error(exc)
                return
            self.notify(
                "system prompt saved" if text.strip() else "system prompt cleared", timeout=2
            )

        self.app.push_screen(
            EditorScreen(f"System prompt for “{chat.title}”", chat.system_prompt or ""), done
        )

    @guarded
    def action_stop(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
            return
        if self.pending is not None:
            job, self.pending = self.pending, None
            self.call_later(self._drop_pending, job)

    async def _drop_pending(self, job: ReplyJob) -> None:
        if job.view.is_attached:
            await job.view.finish(None, {})
            await job.view.remove()
        self.notify("the waiting prompt will not be answered", timeout=3)
        self.update_status()

    @guarded
    async def action_regenerate(self) -> None:
        if self.busy() or self.chat_id is None or (service := self.samchat.service) is None:
            return
        view = self.target_view("assistant")
        rows = self.current_rows()
        if view is not None and view.parent_id is not None:
            user_id = view.parent_id
        else:  # no reply yet (e.g. it failed): answer the last user message
            users = [r for r in rows if r.role == "user"]
            if not users:
                self.notify("nothing to regenerate yet", severity="warning")
                return
            user_id = users[-1].id
        ids = [r.id for r in rows]
        upto = rows[: ids.index(user_id) + 1] if user_id in ids else rows
        await self.chat_view.show_thread(upto, service.store.branches(upto))
        # The question keeps the sources it was sent with: the new reply names them too.
        answered = view is not None and view.parent_id == user_id
        sources = view.stats.get("sources") if view is not None and answered else None
        try:
            reply = service.regenerate(
                self.chat_id, user_id, model=self.samchat.model_name, sources=sources
            )
        except SamchatError as exc:
            self.samchat.error(exc, "Database")
            return
        await self.start_reply(reply)

    @guarded
    def action_edit_message(self) -> None:
        if self.busy() or self.chat_id is None or (service := self.need_service()) is None:
            return
        view = self.target_view("user")
        focused = self.focused
        if isinstance(focused, MessageView) and focused.role == "assistant":
            view = next(
                (v for v in self.chat_view.views() if v.message_id == focused.parent_id), view
            )
        if view is None or view.message_id is None:
            self.notify("there is no message of yours to edit", severity="warning")
            return
        original = service.store.message(view.message_id)
        chat_id = self.chat_id

        async def done(text: str | None) -> None:
            if text is None or not text.strip() or self.chat_id != chat_id:
                return
            try:
                reply = service.edit(original.id, text.strip(), model=self.samchat.model_name)
            except SamchatError as exc:
                self.samchat.error(exc, "Database")
                return
            await self.open_chat(chat_id, reply.parent_id)
            await self.start_reply(reply)

        self.app.push_screen(
            EditorScreen("Edit and resend (makes a new branch)", original.content, accept="Resend"),
            done,
        )

    async def _switch_branch(self, step: int) -> None:
        if self.busy() or self.chat_id is None or (service := self.samchat.service) is None:
            return
        focused = self.focused
        candidates = [focused] if isinstance(focused, MessageView) else []
        candidates += [v for v in reversed(self.chat_view.views()) if v.branch[1] > 1]
        for view in candidates:
            if view.message_id is None:
                continue
            try:
                target = service.switch_branch(view.message_id, step)
            except SamchatError as exc:
                self.samchat.error(exc)
                return
            if target is not None:
                await self.open_chat(self.chat_id, target, focus_id=target)
                return
        self.notify("this message has no other branches", severity="warning")

    @guarded
    async def action_branch_prev(self) -> None:
        await self._switch_branch(-1)

    @guarded
    async def action_branch_next(self) -> None:
        await self._switch_branch(1)

    @guarded
    def action_copy_message(self) -> None:
        view = self.target_view()
        if view is None or not view.content:
            self.notify("no message to copy", severity="warning")
            return
        self.app.copy_to_clipboard(view.content)
        self.notify(f"copied {len(view.content)} characters", timeout=2)

    @guarded
    def action_copy_code(self) -> None:
        focused = self.focused
        views = [focused] if isinstance(focused, MessageView) else []
        views += list(reversed(self.chat_view.views()))
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

    @guarded
    def action_toggle_provenance(self) -> None:
        on_now = not self.chat_view.has_class("-provenance")
        if on_now:  # streaming replies skip it while hidden
            for view in self.chat_view.views():
                view.refresh_provenance()
        self.chat_view.set_class(on_now, "-provenance")
        self.query_one("#legend").display = on_now

    @guarded
    def action_toggle_stats(self) -> None:
        self.chat_view.toggle_class("-show-stats")

    async def _step_message(self, step: int) -> None:
        views = self.chat_view.views()
        if not views:
            return
        focused = self.focused
        if not isinstance(focused, MessageView) or focused not in views:
            index = len(views) if step < 0 else -1  # from the prompt: start at the newest
        else:
            index = views.index(focused)
        target = index + step
        if target < 0:
            if await self.chat_view.load_earlier():
                views = self.chat_view.views()
                target = views.index(focused) - 1 if isinstance(focused, MessageView) else 0
            else:
                target = 0
        if target >= len(views):
            self.prompt.focus()
            return
        views[target].focus()
        views[target].scroll_visible(animate=False)

    @guarded
    async def action_message_up(self) -> None:
        await self._step_message(-1)

    @guarded
    async def action_message_down(self) -> None:
        await self._step_message(1)

    @guarded
    def on_message_view_focused(self, event: MessageView.Focused) -> None:
        """A finished reply shows its stored figures (and speed trace) in the stats bar."""
        view = event.view
        if self.job is not None or view.role != "assistant" or not view.stats:
            return
        live = LiveStats(0.0)
        live.tokens = int(view.stats.get("tokens") or 0)
        live.speeds = [float(x) for x in view.stats.get("speed_trace") or []]
        live.on_done(view.stats)
        self.query_one(StatsBar).show(live, f"{view.stats.get('finish_reason', '')} (stored)")

    @guarded
    async def action_load_earlier(self) -> None:
        added = await self.chat_view.load_earlier()
        if not added:
            self.notify("this is the start of the chat", timeout=2)

    @guarded
    def action_import_documents(self) -> None:
        data = self.samchat.need_data()
        if data is None:
            return
        store_path = data.path

        def importer(path: str, progress: Any) -> str:
            return import_documents(path, store_path, progress)

        def imported() -> None:
            self.samchat.poke_indexer()  # the static index learns the new documents
            self.refresh_sidebar()  # imported ChatGPT exports become chats

        chat_id = self.chat_id

        def use_in_chat() -> None:
            self.chat_documents.setdefault(chat_id, ChatDocuments()).retrieval = True
            self.update_status()
            self.notify("this chat now answers from the imported documents", title="Documents")

        self.app.push_screen(ImportScreen(importer, imported, use_in_chat))

    @guarded
    def action_documents(self) -> None:
        chat_id = self.chat_id

        def done(docs: ChatDocuments | None) -> None:
            if docs is None:
                return
            self.chat_documents[chat_id] = docs
            self.update_status()
            if docs.active:
                self.notify(f"{docs.summary()} for this chat", title="Documents", timeout=3)

        self.app.push_screen(DocumentsScreen(self.documents), done)
