"""The chat screen's layout and state, and its turns: sending a question (with its documents),
streaming the reply from a worker and saving it through the chat service."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, cast

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, OptionList, Static
from textual.worker import get_current_worker

from samchat.chat.documents import gather_sources
from samchat.chat.live_stats import LiveStats
from samchat.chat.service import ChatService, PendingReply, ReplyRecord, stream_reply
from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.remote import REMOTE
from samchat.tui.guard import guarded
from samchat.tui.screens.documents import ChatDocuments
from samchat.tui.states import ModelState
from samchat.tui.widgets.chat_view import ChatView
from samchat.tui.widgets.message_view import MessageView, legend_content
from samchat.tui.widgets.prompt import PromptArea
from samchat.tui.widgets.sidebar import CHATS_LISTED, HITS_LISTED, MARKS, Sidebar
from samchat.tui.widgets.stats_bar import StatsBar
from samchat.tui.worker_messages import (
    CurveTiming,
    Notice,
    ReplyDelta,
    ReplyFailed,
    ReplyFinished,
    ReplyJob,
    ReplyReading,
    ReplyStep,
    SourcesFailed,
    SourcesReady,
)

if TYPE_CHECKING:
    from samchat.chat.generator import Replies
    from samchat.decoding.params import SamplingParams
    from samchat.tui.app import SamchatApp


class ChatTurns(Screen[None]):
    """The open chat: its widgets, the reply streaming now or waiting, and the handlers the
    reply worker posts to."""

    def __init__(self) -> None:
        super().__init__()
        self.chat_id: int | None = None
        self.job: ReplyJob | None = None  # the reply streaming now
        self.pending: ReplyJob | None = None  # a reply waiting for the model
        # Retrieval and attached files per chat (None: the chat not created yet).
        self.chat_documents: dict[int | None, ChatDocuments] = {}
        self.preparing = False  # a question's documents are being read and fitted
        self.timing = False  # this machine's costs are being measured (after a first reply)
        self.last_live: LiveStats | None = None
        self.replies_finished = 0  # replies fully handled (stored and shown)

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield Sidebar(id="sidebar")
            with Vertical(id="main"):
                yield ChatView(id="chat-view")
                yield Static(legend_content(), id="legend")
                yield StatsBar(id="stats-bar")
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
        self.samchat.ui_ready()

    # -- helpers -------------------------------------------------------------------------------

    @property
    def samchat(self) -> SamchatApp:
        return cast("SamchatApp", self.app)

    @property
    def chat_view(self) -> ChatView:
        return self.query_one("#chat-view", ChatView)

    @property
    def prompt(self) -> PromptArea:
        return self.query_one("#prompt", PromptArea)

    @property
    def documents(self) -> ChatDocuments:
        return self.chat_documents.setdefault(self.chat_id, ChatDocuments())

    def need_service(self) -> ChatService | None:
        service = self.samchat.service
        if service is None:
            self.samchat.error("the database is not open; restart samchat after fixing it")
        return service

    def busy(self) -> bool:
        if self.job is not None or self.pending is not None or self.preparing:
            self.notify("a reply is in progress; press esc to stop it first", severity="warning")
            return True
        return False

    def update_status(self) -> None:
        try:
            status = self.query_one("#status", Static)
        except NoMatches:  # not composed yet (on_mount shows it), or the app is closing
            return
        app = self.samchat
        parts = []
        if app.model_state == ModelState.READY and app.lm is not None:
            runs = " ".join(p for p in (app.lm.engine, app.lm.dtype) if p)
            parts.append(f"model {app.lm.name} ({runs}, {app.lm.device})")
        elif app.model_state == ModelState.LOADING:
            parts.append(f"loading model… {app.model_progress}".rstrip())
        elif app.model_state == ModelState.FAILED:
            parts.append("model failed to load (ctrl+l to pick another)")
        else:
            parts.append("no model loaded (ctrl+l)")
        if app.lm is None or app.lm.engine != REMOTE:  # a server decodes as it does
            parts.append(f"method {app.cfg.decoding.method}")
        if self.documents.active:
            parts.append(self.documents.summary())
        if app.index_progress:
            parts.append(app.index_progress)
        if self.preparing:
            parts.append("reading documents…")
        elif self.pending is not None and self.timing:
            parts.append("your prompt waits: timing drafts on this CPU (once)…")
        elif self.pending is not None:
            parts.append("your prompt waits for the model…")
        elif self.timing:
            parts.append("timing drafts on this CPU (once; replies draft after it)…")
        elif self.job is not None:
            parts.append("generating… (esc stops)")
        status.update(" · ".join(parts))

    def refresh_sidebar(self) -> None:
        try:
            sidebar = self.query_one(Sidebar)
            query = self.query_one("#search", Input).value.strip()
        except NoMatches:  # not composed yet (on_mount fills it), or the app is closing
            return
        data = self.samchat.data
        if data is None:
            sidebar.show_chats([], None)
            return
        try:
            if query:
                sidebar.show_hits(
                    data.search(query, limit=HITS_LISTED, kinds=("message",), mark=MARKS)
                )
            else:
                sidebar.show_chats(data.chats(limit=CHATS_LISTED), self.chat_id)
        except SamchatError as exc:
            self.samchat.error(exc, "Search" if query else "Database")

    async def open_chat(
        self, chat_id: int | None, leaf_id: int | None = None, focus_id: int | None = None
    ) -> None:
        self.chat_id = chat_id
        self.chat_documents.pop(None, None)  # a new chat starts without documents
        self.update_status()
        view = self.chat_view
        data = self.samchat.data
        if chat_id is None or data is None:
            await view.show_thread([], {})
            self.samchat.sub_title = ""
            return
        try:
            rows = data.thread(chat_id, leaf_id)
            branches = data.branches(rows)
            self.samchat.sub_title = data.chat(chat_id).title
        except SamchatError as exc:
            self.samchat.error(exc)
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

    def target_view(self, role: str | None = None) -> MessageView | None:
        """The focused message if it fits, else the newest message of `role`."""
        focused = self.focused
        if isinstance(focused, MessageView) and (role is None or focused.role == role):
            return focused
        return self.chat_view.last_view(role)

    # -- sidebar and search --------------------------------------------------------------------

    @on(Input.Changed, "#search")
    def _search_changed(self) -> None:
        self.refresh_sidebar()

    @on(Input.Submitted, "#search")
    def _search_submitted(self) -> None:
        lst = self.query_one("#chat-list", OptionList)
        lst.focus()
        if lst.highlighted is None and lst.option_count:
            lst.highlighted = 0

    @guarded
    async def on_sidebar_chat_chosen(self, event: Sidebar.ChatChosen) -> None:
        if self.job is not None and event.chat_id != self.chat_id:
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
        generator = self.samchat.generator
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
            self.samchat.error(exc, "Database")
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
                rule=self.samchat.cfg.documents,
                model=gen.lm.name,
            )
            fitted = gen.fit_sources(history, question, sources, self.samchat.cfg.sampling)
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
        self.samchat.error(msg.error, "Documents")
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
                model=self.samchat.model_name,
                sources=sources,
            )
            assert reply.chat_id is not None and reply.parent_id is not None  # saving is on
            if self.chat_id is None:
                self.chat_id = reply.chat_id
                self.chat_documents[self.chat_id] = self.chat_documents.pop(None, ChatDocuments())
                self.samchat.sub_title = service.store.chat(self.chat_id).title
            row = service.store.message(reply.parent_id)
        except SamchatError as exc:
            self.samchat.error(exc, "Database")
            return
        self.prompt.clear()
        await self.chat_view.add_view(self.chat_view.make_view(row), row)
        self.refresh_sidebar()
        await self.start_reply(reply)

    # -- replies -------------------------------------------------------------------------------

    async def start_reply(self, reply: PendingReply) -> None:
        """A streaming view for `reply`; generation starts now, or when the model is ready."""
        view = MessageView(
            message_id=None,
            role="assistant",
            content="",
            model=self.samchat.model_name,
            parent_id=reply.parent_id,
        )
        await self.chat_view.add_view(view)
        view.start_stream()
        job = ReplyJob(reply, view, LiveStats(time.perf_counter()))
        if self.samchat.generator is None:
            self.pending = job
            if self.samchat.model_state != ModelState.LOADING:
                self.notify(
                    "no model is loaded: ctrl+l picks one; the prompt waits", severity="warning"
                )
            self.update_status()
            return
        self.launch(job)

    def model_ready(self) -> None:
        """A model was loaded: the prompt that waited for it is answered now."""
        self.update_status()
        if self.pending is not None:
            job, self.pending = self.pending, None
            self.launch(job)

    def launch(self, job: ReplyJob) -> None:
        generator = self.samchat.generator
        assert generator is not None
        if self.timing:  # the model is busy timing this machine: the prompt waits its turn
            self.pending = job
            self.update_status()
            return
        job.live = LiveStats(time.perf_counter())
        job.reply.model = generator.lm.name
        self.job = job
        self.update_status()
        self.run_reply(job, generator, dataclasses.replace(self.samchat.cfg.sampling))

    @work(thread=True, group="reply", exit_on_error=False)
    def run_reply(self, job: ReplyJob, gen: Replies, sampling: SamplingParams) -> None:
        """The chat service's stream, posted back to the UI (which saves the record)."""
        try:
            from samchat.decoding.events import PrefillProgress, StepStats, TextDelta

            events = stream_reply(gen, job.reply, sampling, job.cancel, job.live.started)
            timing = False
            for ev in events:
                if isinstance(ev, TextDelta):
                    pieces = [(text, source) for text, source in ev.pieces]
                    now = time.perf_counter()
                    n = ev.tokens
                    self.post_message(ReplyDelta(job, ev.text, pieces, n, list(ev.sources), now))
                elif isinstance(ev, StepStats):
                    self.post_message(ReplyStep(job, ev.forward_s, ev.draft_size == 0))
                elif isinstance(ev, PrefillProgress):
                    self.post_message(ReplyReading(job, ev.done, ev.total))
                elif isinstance(ev, ReplyRecord):
                    # Timing starts before the UI learns the reply is done, so that a prompt
                    # sent meanwhile waits for it instead of racing it for the CPU.
                    timing = gen.curve_missing()
                    if timing:
                        self.post_message(CurveTiming(True))
                    self.post_message(ReplyFinished(job, ev))
            if timing:
                self._time_machine(gen)
        except SamchatError as exc:
            self.post_message(ReplyFailed(job, str(exc)))
        except Exception as exc:  # a decoder bug must not take the UI down
            self.post_message(ReplyFailed(job, f"{type(exc).__name__}: {exc}"))

    def _time_machine(self, gen: Replies) -> None:
        """In the reply worker, after a plain first reply: time this machine once. Closing the
        app cancels the worker, which stops the timing at its next forward."""
        worker = get_current_worker()
        try:
            gen.measure_cost_curve(lambda: worker.is_cancelled)
        except SamchatError as exc:  # stopped, or failed: replies stay plain, and say so
            if not worker.is_cancelled:
                self.samchat.post_message(Notice(f"timing drafts failed: {exc}", "Decoder"))
        except Exception as exc:  # a measurement bug must not take the UI down
            self.samchat.post_message(
                Notice(f"timing drafts failed: {type(exc).__name__}: {exc}", "Decoder")
            )
        finally:
            self.post_message(CurveTiming(False))

    async def on_reply_delta(self, msg: ReplyDelta) -> None:
        msg.job.live.on_delta(msg.n, msg.sources, msg.t)
        if msg.job.view.is_attached:
            await msg.job.view.append(msg.text, msg.pieces)
        self.query_one(StatsBar).show(msg.job.live, "streaming")

    def on_curve_timing(self, msg: CurveTiming) -> None:
        self.timing = msg.busy
        if not msg.busy:
            self.model_ready()  # a prompt that waited is answered now
        self.update_status()

    def on_reply_reading(self, msg: ReplyReading) -> None:
        if msg.job.view.is_attached:
            msg.job.view.show_reading(msg.done, msg.total)

    def on_reply_step(self, msg: ReplyStep) -> None:
        msg.job.live.on_step(msg.forward_s, msg.plain)

    @guarded
    async def on_reply_finished(self, msg: ReplyFinished) -> None:
        job, record = msg.job, msg.record
        if self.job is job:
            self.job = None
        stored = record.stats.to_dict()  # as the store keeps it, and the views show it
        job.live.on_done(stored)
        view = job.view
        if record.finish_reason == "interrupted":  # a server broke off: the text is kept
            self.notify(record.notice, title="Reply interrupted", severity="warning", timeout=10)
        elif record.notice:
            self.notify(record.notice, title="Context")
        message_id: int | None = None
        service = self.samchat.service
        if service is not None:
            try:
                message_id = service.finish(job.reply, record)
            except SamchatError as exc:
                self.samchat.error(exc, "Database")
            else:
                self.samchat.poke_indexer()  # the turn joins the static index for later replies
        if not view.is_attached:  # the user opened another chat meanwhile
            await view.drop_stream()
        else:
            # The engine's figures and provenance; the streamed view matches them.
            await view.finish(message_id, stored)
            if message_id is not None and service is not None and self.chat_id == job.chat_id:
                self.chat_view.rows.append(service.store.message(message_id))
                self._refresh_branch_headers()
        self.query_one(StatsBar).show(job.live, record.finish_reason)
        if record.finish_reason == "cancelled":
            self.notify("stopped", timeout=2)
        self.refresh_sidebar()
        self.update_status()
        self.last_live = job.live
        self.replies_finished += 1

    def _refresh_branch_headers(self) -> None:
        data = self.samchat.data
        if data is None:
            return
        try:
            branches = data.branches(self.chat_view.rows)
        except SamchatError:
            return
        self.chat_view.branches = branches
        for view in self.chat_view.views():
            if view.message_id is not None:
                view.show_branch(branches.get(view.message_id, (1, 1)))

    @guarded
    async def on_reply_failed(self, msg: ReplyFailed) -> None:
        if self.job is msg.job:
            self.job = None
        await msg.job.view.drop_stream()
        if msg.job.view.is_attached:
            await msg.job.view.remove()
        self.samchat.error(msg.error, "Generation failed")
        self.update_status()
