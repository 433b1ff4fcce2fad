"""The chat screen: the sidebar, the conversation and the prompt, composed. It keeps the open
chat and saves its turns through the chat service: a question when it is sent, a reply when the
conversation reports it done. Its keys are the app's bindings (`screen.<action>`), so the
keymap, the footer and the command palette stay in one place (samchat/tui/keys.py); the dialogs
its actions open are in chat_dialogs.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Static

from samchat.chat.documents import gather_sources
from samchat.chat.service import ChatService, PendingReply
from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.tui.guard import guarded
from samchat.tui.screens import chat_dialogs as dialogs
from samchat.tui.screens.documents import ChatDocuments
from samchat.tui.status_line import status_line
from samchat.tui.widgets.chat_view import ChatView
from samchat.tui.widgets.conversation import Conversation
from samchat.tui.widgets.message_view import MessageView
from samchat.tui.widgets.prompt import PromptArea
from samchat.tui.widgets.sidebar import Sidebar
from samchat.tui.worker_messages import SourcesFailed, SourcesReady

if TYPE_CHECKING:
    from samchat.chat.generator import Replies
    from samchat.store import Store
    from samchat.tui.host import ChatHost


class ChatScreen(Screen[None]):
    """The app's default screen."""

    def __init__(self, host: ChatHost) -> None:
        super().__init__()
        self.host = host
        self.chat_id: int | None = None
        # Retrieval and attached files per chat (None: the chat not created yet).
        self.chat_documents: dict[int | None, ChatDocuments] = {}
        self.preparing = False  # a question's documents are being read and fitted
        self.replies_finished = 0  # replies fully handled (stored and shown)
        # Kept: the app stops its reply when it closes, after the screen's widgets are gone.
        self.conversation = Conversation(host, id="conversation")

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield Sidebar(self.host, id="sidebar")
            with Vertical(id="main"):
                yield self.conversation
                yield PromptArea(
                    id="prompt",
                    placeholder="Message samchat (enter sends, shift+enter / ctrl+j new line)",
                )
                yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.refresh_sidebar()
        self.update_status()
        self.prompt.focus()
        self.host.ui_ready()

    # -- helpers -------------------------------------------------------------------------------

    @property
    def chat_view(self) -> ChatView:
        return self.conversation.chat_view

    @property
    def prompt(self) -> PromptArea:
        return self.query_one("#prompt", PromptArea)

    @property
    def documents(self) -> ChatDocuments:
        return self.chat_documents.setdefault(self.chat_id, ChatDocuments())

    def need_service(self) -> ChatService | None:
        service = self.host.service
        if service is None:
            self.host.error("the database is not open; restart samchat after fixing it")
        return service

    def need_data(self) -> Store | None:
        data = self.host.data
        if data is None:
            self.host.error("the database is not open; restart samchat after fixing it")
        return data

    def busy(self) -> bool:
        if self.conversation.busy or self.preparing:
            self.notify("a reply is in progress; press esc to stop it first", severity="warning")
            return True
        return False

    def update_status(self) -> None:
        try:
            status = self.query_one("#status", Static)
        except NoMatches:  # not composed yet (on_mount shows it), or the app is closing
            return
        status.update(status_line(self.host, self.documents, self.conversation, self.preparing))

    def refresh_sidebar(self) -> None:
        try:
            self.query_one(Sidebar).refresh_chats(self.chat_id)
        except NoMatches:  # not composed yet (on_mount fills it), or the app is closing
            return

    async def open_chat(
        self, chat_id: int | None, leaf_id: int | None = None, focus_id: int | None = None
    ) -> None:
        self.chat_id = chat_id
        self.chat_documents.pop(None, None)  # a new chat starts without documents
        self.update_status()
        view = self.chat_view
        data = self.host.data
        if chat_id is None or data is None:
            await view.show_thread([], {})
            self.app.sub_title = ""
            return
        try:
            rows = data.thread(chat_id, leaf_id)
            branches = data.branches(rows)
            self.app.sub_title = data.chat(chat_id).title
        except SamchatError as exc:
            self.host.error(exc)
            return
        await view.show_thread(rows, branches)
        self.query_one(Sidebar).highlight(chat_id)
        if focus_id is not None:
            for mv in view.views():
                if mv.message_id == focus_id:
                    mv.focus()
                    mv.scroll_visible(animate=False)
                    break

    def current_rows(self) -> list[Any]:
        return self.chat_view.rows

    def model_ready(self) -> None:
        """A model was loaded: the prompt that waited for it is answered now."""
        self.update_status()
        self.conversation.model_ready()

    # -- the sidebar ---------------------------------------------------------------------------

    @guarded
    async def on_sidebar_chat_chosen(self, event: Sidebar.ChatChosen) -> None:
        if self.conversation.job is not None and event.chat_id != self.chat_id:
            self.notify("the reply keeps streaming into its own chat", timeout=3)
        await self.open_chat(event.chat_id, event.message_id, focus_id=event.message_id)
        if event.message_id is None:
            self.prompt.focus()

    @on(Button.Pressed, "#load-earlier")
    async def _load_earlier_pressed(self) -> None:
        await self.chat_view.load_earlier()

    # -- sending -------------------------------------------------------------------------------

    @guarded
    async def on_prompt_area_submitted(self, event: PromptArea.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.busy() or (service := self.need_service()) is None:
            return
        docs = self.documents
        if not docs.active:
            await self.send(text, text)
            return
        generator = self.host.generator
        if generator is None:
            self.notify(
                "load a model first (ctrl+l): documents are fitted to its context",
                severity="warning",
            )
            return
        rows = self.current_rows()
        try:
            history = service.history(self.chat_id, rows[-1].id if rows else None)
        except SamchatError as exc:
            self.host.error(exc, "Database")
            return
        self.preparing = True
        self.prompt.clear()
        self.update_status()
        self.prepare_sources(
            self.chat_id, text, history, docs.retrieval, list(docs.files), generator, service
        )

    @work(thread=True, group="sources", exit_on_error=False)
    def prepare_sources(
        self,
        chat_id: int | None,
        question: str,
        history: list[Message],
        retrieval: bool,
        files: list[Any],
        gen: Replies,
        service: ChatService,
    ) -> None:
        try:
            sources = gather_sources(
                service.store.path,
                question,
                retrieval=retrieval,
                files=files,
                rule=self.host.cfg.documents,
                model=gen.lm.name,
            )
            fitted = gen.fit_sources(history, question, sources, self.host.cfg.sampling)
        except SamchatError as exc:
            self.post_message(SourcesFailed(question, str(exc)))
        except Exception as exc:  # never take the UI down over a document
            self.post_message(SourcesFailed(question, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(SourcesReady(chat_id, question, fitted))

    @guarded
    async def on_sources_ready(self, msg: SourcesReady) -> None:
        self.preparing = False
        fitted = msg.fitted
        for notice in fitted.notices:
            self.notify(notice, title="Documents", severity="warning", timeout=8)
        if not fitted.sources:
            self.notify("no document passage matches; asking without them", title="Documents")
        if self.chat_id != msg.chat_id:  # the user moved to another chat meanwhile
            await self.open_chat(msg.chat_id)
        await self.send(msg.question, fitted.content, [s.record() for s in fitted.sources])

    def on_sources_failed(self, msg: SourcesFailed) -> None:
        self.preparing = False
        if not self.prompt.text.strip():
            self.prompt.load_text(msg.question)  # nothing was sent: the question comes back
        self.host.error(msg.error, "Documents")
        self.update_status()

    async def send(
        self, question: str, content: str, sources: list[dict[str, Any]] | None = None
    ) -> None:
        """Save `content` (the question, after its sources if any) and start the reply."""
        service = self.need_service()
        if service is None:
            return
        rows = self.current_rows()
        try:
            reply = service.send(
                question,
                content=content,
                chat_id=self.chat_id,
                parent_id=rows[-1].id if rows and self.chat_id is not None else None,
                model=self.host.model_name,
                sources=sources,
            )
            assert reply.chat_id is not None and reply.parent_id is not None  # saving is on
            if self.chat_id is None:
                self.chat_id = reply.chat_id
                self.chat_documents[self.chat_id] = self.chat_documents.pop(None, ChatDocuments())
                self.app.sub_title = service.store.chat(self.chat_id).title
            row = service.store.message(reply.parent_id)
        except SamchatError as exc:
            self.host.error(exc, "Database")
            return
        self.prompt.clear()
        await self.chat_view.add_view(self.chat_view.make_view(row), row)
        self.refresh_sidebar()
        await self.conversation.start_reply(reply, self.host.model_name)
        self.update_status()

    # -- the conversation's reports ------------------------------------------------------------

    def on_conversation_changed(self) -> None:
        self.update_status()

    @guarded
    async def on_conversation_reply_done(self, event: Conversation.ReplyDone) -> None:
        """Save the reply, then the conversation shows it as saved."""
        job, record = event.job, event.record
        message_id: int | None = None
        row = None
        service = self.host.service
        try:
            if service is not None:
                try:
                    message_id = service.finish(job.reply, record)
                except SamchatError as exc:
                    self.host.error(exc, "Database")
                else:
                    self.host.poke_indexer()  # the turn joins the static index for later replies
                    if message_id is not None and self.chat_id == job.chat_id:
                        row = service.store.message(message_id)
        finally:
            shown = await self.conversation.settle(job, record, message_id, row)
        if shown:
            self.refresh_branch_headers()
        self.refresh_sidebar()
        self.update_status()
        self.replies_finished += 1

    def refresh_branch_headers(self) -> None:
        data = self.host.data
        if data is None:
            return
        try:
            branches = data.branches(self.chat_view.rows)
        except SamchatError:
            return
        self.chat_view.show_branches(branches)

    # -- actions (the app's bindings) ----------------------------------------------------------

    @guarded
    async def action_new_chat(self) -> None:
        await self.open_chat(None)
        self.query_one("#search", Input).value = ""
        self.refresh_sidebar()
        self.prompt.focus()

    @guarded
    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def _open_chat_data(self) -> tuple[int, Store] | None:
        if self.chat_id is None or (data := self.need_data()) is None:
            self.notify("open a chat first", severity="warning")
            return None
        return self.chat_id, data

    @guarded
    def action_rename_chat(self) -> None:
        if (opened := self._open_chat_data()) is None:
            return
        chat_id, data = opened

        def renamed(title: str) -> None:
            if self.chat_id == chat_id:
                self.app.sub_title = title
            self.refresh_sidebar()

        dialogs.rename_chat(self.app, data, chat_id, self.host.error, renamed)

    @guarded
    def action_delete_chat(self) -> None:
        if (opened := self._open_chat_data()) is None or self.busy():
            return
        chat_id, data = opened

        async def deleted() -> None:
            if self.chat_id == chat_id:
                await self.open_chat(None)
            self.refresh_sidebar()
            self.host.poke_indexer()
            self.notify("chat deleted", timeout=2)

        dialogs.delete_chat(self.app, data, chat_id, self.host.error, deleted)

    @guarded
    def action_system_prompt(self) -> None:
        if (data := self.need_data()) is None:
            return
        try:
            if self.chat_id is None:
                self.chat_id = data.create_chat("New chat", self.host.model_name)
                self.refresh_sidebar()
            chat = data.chat(self.chat_id)
        except SamchatError as exc:
            self.host.error(exc)
            return
        dialogs.system_prompt(self.app, data, chat, self.host.error)

    @guarded
    def action_stop(self) -> None:
        self.conversation.stop()

    @guarded
    async def action_regenerate(self) -> None:
        if self.busy() or self.chat_id is None or (service := self.host.service) is None:
            return
        view = self.conversation.target_view("assistant")
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
        sources = list(view.stats.sources) if view is not None and answered else None
        try:
            reply = service.regenerate(
                self.chat_id, user_id, model=self.host.model_name, sources=sources
            )
        except SamchatError as exc:
            self.host.error(exc, "Database")
            return
        await self.conversation.start_reply(reply, self.host.model_name)
        self.update_status()

    @guarded
    def action_edit_message(self) -> None:
        if self.busy() or self.chat_id is None or (service := self.need_service()) is None:
            return
        view = self.conversation.target_view("user")
        focused = self.focused
        if isinstance(focused, MessageView) and focused.role == "assistant":
            view = next(
                (v for v in self.chat_view.views() if v.message_id == focused.parent_id), view
            )
        if view is None or view.message_id is None:
            self.notify("there is no message of yours to edit", severity="warning")
            return
        chat_id = self.chat_id

        async def resend(reply: PendingReply) -> None:
            await self.open_chat(chat_id, reply.parent_id)
            await self.conversation.start_reply(reply, self.host.model_name)
            self.update_status()

        original = service.store.message(view.message_id)
        dialogs.edit_message(
            self.app,
            service,
            original,
            lambda: self.host.model_name,
            self.host.error,
            resend,
            lambda: self.chat_id == chat_id,
        )

    async def _switch_branch(self, step: int) -> None:
        if self.busy() or self.chat_id is None or (service := self.host.service) is None:
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
                self.host.error(exc)
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
        self.conversation.copy_message()

    @guarded
    def action_copy_code(self) -> None:
        self.conversation.copy_code()

    @guarded
    def action_toggle_provenance(self) -> None:
        self.conversation.toggle_provenance()

    @guarded
    def action_toggle_stats(self) -> None:
        self.conversation.toggle_stats()

    @guarded
    async def action_message_up(self) -> None:
        await self.conversation.step_message(-1)

    @guarded
    async def action_message_down(self) -> None:
        if not await self.conversation.step_message(1):
            self.prompt.focus()

    @guarded
    async def action_load_earlier(self) -> None:
        await self.conversation.load_earlier()

    @guarded
    def action_import_documents(self) -> None:
        if (data := self.need_data()) is None:
            return
        chat_id = self.chat_id

        def imported() -> None:
            self.host.poke_indexer()  # the static index learns the new documents
            self.refresh_sidebar()  # imported ChatGPT exports become chats

        def use_in_chat() -> None:
            self.chat_documents.setdefault(chat_id, ChatDocuments()).retrieval = True
            self.update_status()
            self.notify("this chat now answers from the imported documents", title="Documents")

        dialogs.import_documents(self.app, data, imported, use_in_chat)

    @guarded
    def action_documents(self) -> None:
        chat_id = self.chat_id

        def chosen(docs: ChatDocuments) -> None:
            self.chat_documents[chat_id] = docs
            self.update_status()
            if docs.active:
                self.notify(f"{docs.summary()} for this chat", title="Documents", timeout=3)

        dialogs.chat_documents(self.app, self.documents, chosen)
