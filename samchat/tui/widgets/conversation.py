"""The open chat's conversation: its messages (a ChatView, the legend of the provenance colours
and the stats bar of the reply's figures) and each turn of it. A question is saved when it is
sent, after its documents are read and fitted by this widget's sources worker; its reply is
its ReplyController's (reply_controller.py), which streams, saves and reports it. What the
screen shows around it follows the messages they post: Opened, Sent, Returned, Changed, and the
controller's Changed and Settled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Static

from samchat.chat.documents import gather_sources
from samchat.chat.live_stats import LiveStats
from samchat.chat.service import PendingReply
from samchat.errors import SamchatError
from samchat.tui.guard import guarded
from samchat.tui.screens import chat_dialogs as dialogs
from samchat.tui.widgets.chat_view import ChatView
from samchat.tui.widgets.message_view import MessageView, legend_content
from samchat.tui.widgets.reply_controller import ReplyController
from samchat.tui.widgets.stats_bar import StatsBar
from samchat.tui.worker_messages import SourcesFailed, SourcesReady

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from samchat.chat.generator import Replies
    from samchat.chat.service import ChatService
    from samchat.figures import SourceRef
    from samchat.messages import Message as ChatMessage
    from samchat.tui.host import ChatHost
    from samchat.tui.screens.documents import ChatDocuments


class Conversation(Vertical):
    @dataclass
    class Changed(Message):
        """A question's documents began or ended being read: the status follows."""

    @dataclass
    class Opened(Message):
        """A chat is shown (None: a new one, not saved yet), titled `title`."""

        chat_id: int | None
        title: str

    @dataclass
    class Sent(Message):
        """A question was saved in `chat_id`; `title`: the chat's, where it was created for it."""

        chat_id: int
        title: str | None

    @dataclass
    class Returned(Message):
        """A question's documents could not be read: it was not sent, and goes back."""

        question: str

    def __init__(self, host: ChatHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host  # the model that answers, and the sampling it answers with
        self.chat_id: int | None = None  # the chat shown (None: a new one)
        self.preparing = False  # a question's documents are being read and fitted
        self.replies = ReplyController(host, self)

    def compose(self) -> ComposeResult:
        yield ChatView(id="chat-view")
        yield Static(legend_content(), id="legend")
        yield StatsBar(id="stats-bar")
        yield self.replies

    @property
    def chat_view(self) -> ChatView:
        return self.query_one("#chat-view", ChatView)

    @property
    def stats_bar(self) -> StatsBar:
        return self.query_one(StatsBar)

    @property
    def busy(self) -> bool:
        return self.replies.job is not None or self.replies.pending is not None or self.preparing

    async def show_chat(self, chat_id: int | None, leaf_id: int | None = None) -> bool:
        """Show the branch of `chat_id` that ends at `leaf_id` (None: its newest); False when
        the store could not read it."""
        self.chat_id = chat_id
        data = self.host.data
        if chat_id is None or data is None:
            await self.chat_view.show_thread([], {})
            self.post_message(self.Opened(None, ""))
            return True
        try:
            rows = data.thread(chat_id, leaf_id)
            branches = data.branches(rows)
            title = data.chat(chat_id).title
        except SamchatError as exc:
            self.host.error(exc)
            return False
        await self.chat_view.show_thread(rows, branches)
        self.post_message(self.Opened(chat_id, title))
        return True

    # -- a question ----------------------------------------------------------------------------

    async def ask(self, question: str, documents: ChatDocuments, service: ChatService) -> bool:
        """Send `question`, after the sources worker has read and fitted `documents` where the
        chat has any. False: it was not taken (the prompt keeps it)."""
        if not documents.active:
            return await self.send(question, question)
        generator = self.host.generator
        if generator is None:
            self.notify(
                "load a model first (ctrl+l): documents are fitted to its context",
                severity="warning",
            )
            return False
        rows = self.chat_view.rows
        try:
            history = service.history(self.chat_id, rows[-1].id if rows else None)
        except SamchatError as exc:
            self.host.error(exc, "Database")
            return False
        self.preparing = True
        self.post_message(self.Changed())
        files = list(documents.files)
        self.read_sources(self.chat_id, question, history, documents.retrieval, files, generator)
        return True

    @work(thread=True, group="sources", exit_on_error=False)
    def read_sources(
        self,
        chat_id: int | None,
        question: str,
        history: list[ChatMessage],
        retrieval: bool,
        files: list[Path],
        gen: Replies,
    ) -> None:
        """The attached files and retrieved passages, fitted to the context, posted back."""
        cfg, data = self.host.cfg, self.host.data
        try:
            if data is None:
                raise SamchatError("the database is not open")
            sources = gather_sources(
                data.path,
                question,
                retrieval=retrieval,
                files=files,
                rule=cfg.documents,
                model=gen.lm.name,
            )
            fitted = gen.fit_sources(history, question, sources, cfg.sampling)
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
            await self.show_chat(msg.chat_id)
        await self.send(msg.question, fitted.content, [s.ref() for s in fitted.sources])

    def on_sources_failed(self, msg: SourcesFailed) -> None:
        self.preparing = False
        self.post_message(self.Returned(msg.question))
        self.host.error(msg.error, "Documents")
        self.post_message(self.Changed())

    async def send(self, question: str, content: str, sources: Sequence[SourceRef] = ()) -> bool:
        """Save `content` (the question, after its sources if any) and start the reply; False
        when it could not be saved."""
        service = self.host.service
        if service is None:
            self.host.error("the database is not open; restart samchat after fixing it")
            return False
        rows = self.chat_view.rows
        new = self.chat_id is None
        try:
            reply = service.send(
                question,
                content=content,
                chat_id=self.chat_id,
                parent_id=rows[-1].id if rows and not new else None,
                model=self.host.model_name,
                sources=sources,
            )
            assert reply.chat_id is not None and reply.parent_id is not None  # saving is on
            self.chat_id = reply.chat_id
            row = service.store.message(reply.parent_id)
            title = service.store.chat(reply.chat_id).title if new else None
        except SamchatError as exc:
            self.host.error(exc, "Database")
            return False
        self.post_message(self.Sent(reply.chat_id, title))
        await self.chat_view.add_view(self.chat_view.make_view(row), row)
        await self.replies.start_reply(reply, self.host.model_name)
        return True

    async def regenerate(self) -> None:
        """Another reply to the question of the focused reply (else of the newest question)."""
        service = self.host.service
        if self.chat_id is None or service is None:
            return
        view = self.chat_view.target_view("assistant")
        rows = self.chat_view.rows
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
        sources = view.stats.sources if view is not None and view.stats and answered else ()
        try:
            reply = service.regenerate(
                self.chat_id, user_id, model=self.host.model_name, sources=sources
            )
        except SamchatError as exc:
            self.host.error(exc, "Database")
            return
        await self.replies.start_reply(reply, self.host.model_name)

    async def switch_branch(self, step: int) -> None:
        """Show the branch `step` places away at the focused message, else at the newest
        message that has others."""
        service = self.host.service
        if self.chat_id is None or service is None:
            return
        focused = self.screen.focused
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
                if await self.show_chat(self.chat_id, target):
                    self.chat_view.focus_message(target)
                return
        self.notify("this message has no other branches", severity="warning")

    def edit(self) -> None:
        """Edit the focused question (or the one a focused reply answers, else the newest) in
        a dialog; the edited text is a new branch, answered at once."""
        service, chat_id = self.host.service, self.chat_id
        if service is None or chat_id is None:
            return
        view = self.chat_view.target_view("user")
        focused = self.screen.focused
        if isinstance(focused, MessageView) and focused.role == "assistant":
            view = next(
                (v for v in self.chat_view.views() if v.message_id == focused.parent_id), view
            )
        if view is None or view.message_id is None:
            self.notify("there is no message of yours to edit", severity="warning")
            return

        async def resend(reply: PendingReply) -> None:
            await self.show_chat(chat_id, reply.parent_id)
            await self.replies.start_reply(reply, self.host.model_name)

        dialogs.edit_message(
            self.app,
            service,
            service.store.message(view.message_id),
            lambda: self.host.model_name,
            self.host.error,
            resend,
            lambda: self.chat_id == chat_id,
        )

    def refresh_branch_headers(self) -> None:
        data = self.host.data
        if data is None:
            return
        try:
            branches = data.branches(self.chat_view.rows)
        except SamchatError:
            return
        self.chat_view.show_branches(branches)

    # -- the messages shown --------------------------------------------------------------------

    def toggle_provenance(self) -> None:
        on_now = not self.chat_view.has_class("-provenance")
        if on_now:  # streaming replies skip it while hidden
            for view in self.chat_view.views():
                view.refresh_provenance()
        self.chat_view.set_class(on_now, "-provenance")
        self.query_one("#legend").display = on_now

    def toggle_stats(self) -> None:
        self.chat_view.toggle_class("-show-stats")

    @guarded
    def on_message_view_focused(self, event: MessageView.Focused) -> None:
        """A finished reply shows its stored figures (and speed trace) in the stats bar."""
        view = event.view
        stats = view.stats
        if self.replies.job is not None or view.role != "assistant" or stats is None:
            return
        live = LiveStats(0.0)
        live.tokens = stats.reply.tokens
        live.speeds = list(stats.speed_trace)
        live.on_done(stats)
        self.stats_bar.show(live, f"{stats.finish_reason} (stored)")
