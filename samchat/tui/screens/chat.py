"""The chat screen: the sidebar, the conversation and the prompt, composed, and each chat's
documents. The conversation owns the turns (reading documents, sending, streaming, saving); the
screen hands it the prompt's questions and follows its reports. Its keys are the app's bindings
(`screen.<action>`: samchat/tui/keys.py); the dialogs its actions open are in chat_dialogs.py."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from samchat.chat.service import ChatService
from samchat.errors import SamchatError
from samchat.tui.guard import guarded
from samchat.tui.screens import chat_dialogs as dialogs
from samchat.tui.screens.documents import ChatDocuments
from samchat.tui.status_line import status_line
from samchat.tui.widgets.chat_view import ChatView
from samchat.tui.widgets.conversation import Conversation
from samchat.tui.widgets.prompt_area import PromptArea
from samchat.tui.widgets.reply_controller import ReplyController
from samchat.tui.widgets.sidebar import Sidebar

if TYPE_CHECKING:
    from samchat.store import Store
    from samchat.tui.host import ChatHost


class ChatScreen(Screen[None]):
    """The app's default screen."""

    def __init__(self, host: ChatHost) -> None:
        super().__init__()
        self.host = host
        # Retrieval and attached files per chat (None: the chat not created yet).
        self.chat_documents: dict[int | None, ChatDocuments] = {}
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

    @property
    def chat_id(self) -> int | None:
        """The open chat (None: a new one), as the conversation shows it."""
        return self.conversation.chat_id

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
        if (service := self.host.service) is None:
            self.host.error("the database is not open; restart samchat after fixing it")
        return service

    def need_data(self) -> Store | None:  # the service's store (the app opens both at once)
        return service.store if (service := self.need_service()) is not None else None

    def busy(self) -> bool:
        if self.conversation.busy:
            self.notify("a reply is in progress; press esc to stop it first", severity="warning")
            return True
        return False

    def update_status(self) -> None:
        try:
            status = self.query_one("#status", Static)
        except NoMatches:  # not composed yet (on_mount shows it), or the app is closing
            return
        status.update(status_line(self.host, self.documents, self.conversation))

    def refresh_sidebar(self) -> None:
        try:
            self.query_one(Sidebar).refresh_chats(self.chat_id)
        except NoMatches:  # not composed yet (on_mount fills it), or the app is closing
            return

    async def open_chat(
        self, chat_id: int | None, leaf_id: int | None = None, focus_id: int | None = None
    ) -> None:
        self.chat_documents.pop(None, None)  # a new chat starts without documents
        if await self.conversation.show_chat(chat_id, leaf_id) and focus_id is not None:
            self.chat_view.focus_message(focus_id)
        self.update_status()

    def model_ready(self) -> None:
        """A model was loaded: the prompt that waited for it is answered now."""
        self.update_status()
        self.conversation.replies.model_ready()

    # -- the sidebar ---------------------------------------------------------------------------

    @guarded
    async def on_sidebar_chat_chosen(self, event: Sidebar.ChatChosen) -> None:
        if self.conversation.replies.job is not None and event.chat_id != self.chat_id:
            self.notify("the reply keeps streaming into its own chat", timeout=3)
        await self.open_chat(event.chat_id, event.message_id, focus_id=event.message_id)
        if event.message_id is None:
            self.prompt.focus()

    # -- the prompt and the conversation's reports ----------------------------------------------

    @guarded
    async def on_prompt_area_submitted(self, event: PromptArea.Submitted) -> None:
        text = event.text.strip()
        if not text or self.busy() or (service := self.need_service()) is None:
            return
        if await self.conversation.ask(text, self.documents, service):
            self.prompt.clear()

    def on_conversation_opened(self, event: Conversation.Opened) -> None:
        self.app.sub_title = event.title
        if event.chat_id is not None:
            self.query_one(Sidebar).highlight(event.chat_id)
        self.update_status()

    def on_conversation_sent(self, event: Conversation.Sent) -> None:
        self.prompt.clear()
        if event.title is not None:  # a new chat: the documents chosen for it are its own now
            self.chat_documents[event.chat_id] = self.chat_documents.pop(None, ChatDocuments())
            self.app.sub_title = event.title
        self.refresh_sidebar()
        self.update_status()

    def on_conversation_returned(self, event: Conversation.Returned) -> None:
        if not self.prompt.text.strip():
            self.prompt.load_text(event.question)  # nothing was sent: the question comes back

    def on_conversation_changed(self) -> None:
        self.update_status()

    def on_reply_controller_changed(self) -> None:
        self.update_status()

    def on_reply_controller_settled(self, event: ReplyController.Settled) -> None:
        self.refresh_sidebar()
        self.update_status()
        self.replies_finished += 1

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
            if (chat_id := self.chat_id) is None:
                chat_id = data.create_chat("New chat", self.host.model_name)
                self.conversation.chat_id = chat_id
                self.refresh_sidebar()
            chat = data.chat(chat_id)
        except SamchatError as exc:
            self.host.error(exc)
            return
        dialogs.system_prompt(self.app, data, chat, self.host.error)

    @guarded
    def action_stop(self) -> None:
        self.conversation.replies.stop()

    @guarded
    async def action_regenerate(self) -> None:
        if not self.busy() and self.chat_id is not None and self.host.service is not None:
            await self.conversation.regenerate()

    @guarded
    def action_edit_message(self) -> None:
        if not self.busy() and self.chat_id is not None and self.need_service() is not None:
            self.conversation.edit()

    @guarded
    async def action_branch_prev(self) -> None:
        if not self.busy():
            await self.conversation.switch_branch(-1)

    @guarded
    async def action_branch_next(self) -> None:
        if not self.busy():
            await self.conversation.switch_branch(1)

    @guarded
    def action_copy_message(self) -> None:
        self.chat_view.copy_message()

    @guarded
    def action_copy_code(self) -> None:
        self.chat_view.copy_code()

    @guarded
    def action_toggle_provenance(self) -> None:
        self.conversation.toggle_provenance()

    @guarded
    def action_toggle_stats(self) -> None:
        self.conversation.toggle_stats()

    @guarded
    async def action_message_up(self) -> None:
        await self.chat_view.step_message(-1)

    @guarded
    async def action_message_down(self) -> None:
        if not await self.chat_view.step_message(1):
            self.prompt.focus()

    @guarded
    async def action_load_earlier(self) -> None:
        await self.chat_view.load_earlier_or_say()

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
        dialogs.chat_documents(self.app, self.chat_documents, self.chat_id, self.update_status)
