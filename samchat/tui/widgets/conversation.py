"""The open chat's conversation: its messages (a ChatView, the legend of the provenance colours
and the stats bar of the reply's figures) and each turn of it. A question is saved when it is
sent, after its documents are read and fitted by this widget's sources worker; its reply
streams in from this widget's reply worker (or waits for the model) and is saved when it ends.
What the screen shows around it follows the messages it posts: Opened, Sent, Settled, Changed."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import get_current_worker

from samchat.chat.documents import gather_sources
from samchat.chat.live_stats import LiveStats
from samchat.chat.service import PendingReply, ReplyRecord
from samchat.errors import SamchatError
from samchat.tui.guard import guarded
from samchat.tui.reply_stream import stream_to
from samchat.tui.screens import chat_dialogs as dialogs
from samchat.tui.states import ModelState
from samchat.tui.widgets.chat_view import ChatView
from samchat.tui.widgets.message_view import MessageView, legend_content
from samchat.tui.widgets.stats_bar import StatsBar
from samchat.tui.worker_messages import (
    CurveTiming,
    ReplyFailed,
    ReplyFinished,
    ReplyJob,
    ReplyReading,
    SourcesFailed,
    SourcesReady,
)

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from samchat.chat.generator import Replies
    from samchat.chat.service import ChatService
    from samchat.decoding.params import SamplingParams
    from samchat.figures import SourceRef
    from samchat.messages import Message as ChatMessage
    from samchat.store import MessageRow
    from samchat.tui.host import ChatHost
    from samchat.tui.screens.documents import ChatDocuments

# How often a streaming reply is shown: a frame's tokens in one update, so the UI's work stays
# a few updates a second whatever the engine's speed (on two cores it competes with the engine).
FRAME_S = 1 / 20


class Conversation(Vertical):
    @dataclass
    class Changed(Message):
        """A reply started, waits, ended, or the machine is being timed: the status follows."""

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

    @dataclass
    class Settled(Message):
        """A reply was saved (or could not be) and shown; `joined`: it joined the thread on
        screen (the branch headers follow)."""

        joined: bool

    def __init__(self, host: ChatHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host  # the model that answers, and the sampling it answers with
        self.chat_id: int | None = None  # the chat shown (None: a new one)
        self.preparing = False  # a question's documents are being read and fitted
        self.job: ReplyJob | None = None  # the reply streaming now (until settled)
        self.pending: ReplyJob | None = None  # a reply waiting for the model
        self.timing = False  # this machine's costs are being measured (after a first reply)
        self.timing_stop = threading.Event()  # Esc, or a new prompt: the timing gives way
        self.last_live: LiveStats | None = None
        self._frames: Timer | None = None  # shows the streaming reply once a frame

    def on_mount(self) -> None:
        self._frames = self.set_interval(FRAME_S, self._show_frame, pause=True)

    def compose(self) -> ComposeResult:
        yield ChatView(id="chat-view")
        yield Static(legend_content(), id="legend")
        yield StatsBar(id="stats-bar")

    @property
    def chat_view(self) -> ChatView:
        return self.query_one("#chat-view", ChatView)

    @property
    def busy(self) -> bool:
        return self.job is not None or self.pending is not None or self.preparing

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
        await self.start_reply(reply, self.host.model_name)
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
        await self.start_reply(reply, self.host.model_name)

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
            await self.start_reply(reply, self.host.model_name)

        dialogs.edit_message(
            self.app,
            service,
            service.store.message(view.message_id),
            lambda: self.host.model_name,
            self.host.error,
            resend,
            lambda: self.chat_id == chat_id,
        )

    # -- the reply -----------------------------------------------------------------------------

    async def start_reply(self, reply: PendingReply, model_name: str) -> None:
        """A streaming view for `reply`; generation starts now, or when the model is ready."""
        view = MessageView(
            message_id=None,
            role="assistant",
            content="",
            model=model_name,
            parent_id=reply.parent_id,
        )
        await self.chat_view.add_view(view)
        view.start_stream()
        job = ReplyJob(reply, view, LiveStats(time.perf_counter()))
        if self.host.generator is None:
            self.pending = job
            if self.host.model_state != ModelState.LOADING:
                self.notify(
                    "no model is loaded: ctrl+l picks one; the prompt waits", severity="warning"
                )
            self.post_message(self.Changed())
            return
        self.launch(job)

    def model_ready(self) -> None:
        """A model was loaded (or timed): the prompt that waited for it is answered now."""
        if self.pending is not None and self.host.generator is not None:
            job, self.pending = self.pending, None
            self.launch(job)

    def launch(self, job: ReplyJob) -> None:
        generator = self.host.generator
        assert generator is not None
        if self.timing:  # the model is busy timing this machine: the prompt waits (Esc: now)
            self.pending = job
            self.post_message(self.Changed())
            return
        job.live = LiveStats(time.perf_counter())
        job.reply.model = generator.lm.name
        self.job = job
        self.post_message(self.Changed())
        self.run_reply(job, generator, dataclasses.replace(self.host.cfg.sampling))
        if self._frames is not None:
            self._frames.resume()

    def stop(self) -> None:
        """Stop the streaming reply, or the timing of the machine (the next reply times it;
        a prompt that waited for it goes at once), or drop the prompt that waits."""
        if self.job is not None:
            self.job.cancel.set()
            return
        if self.timing:  # a prompt waiting for it goes as soon as it has stopped
            self.timing_stop.set()
            return
        if self.pending is not None:
            job, self.pending = self.pending, None
            self.call_later(self._drop_pending, job)

    def stop_all(self) -> None:
        """The app quits: the reply and the timing stop at their next step (a long read at
        once), so that closing this widget, which waits for its worker, takes no time."""
        if self.job is not None:
            self.job.cancel.set()
        self.timing_stop.set()

    async def _drop_pending(self, job: ReplyJob) -> None:
        if job.view.is_attached:
            await job.view.finish(None, None)
            await job.view.remove()
        self.notify("the waiting prompt will not be answered", timeout=3)
        self.post_message(self.Changed())

    @work(thread=True, group="reply", exit_on_error=False)
    def run_reply(self, job: ReplyJob, gen: Replies, sampling: SamplingParams) -> None:
        """The chat service's stream, posted back to this widget."""
        worker = get_current_worker()
        self.timing_stop.clear()
        stream_to(
            self.post_message,
            job,
            gen,
            sampling,
            lambda: worker.is_cancelled,
            lambda: worker.is_cancelled or self.timing_stop.is_set(),
        )

    async def _show_frame(self) -> None:
        if self.job is not None:
            await self._show_feed(self.job)

    async def _show_feed(self, job: ReplyJob) -> None:
        """What the reply's worker produced since the last frame: one update of the text,
        the provenance and the figures, however many tokens it holds."""
        batch = job.feed.take()
        if batch is None:
            return
        job.live.apply(batch)
        if batch.text and job.view.is_attached:
            await job.view.append(batch.text, batch.pieces)
        self.query_one(StatsBar).show(job.live, "streaming")

    def _stop_frames(self) -> None:
        if self._frames is not None and self.job is None:
            self._frames.pause()

    def on_curve_timing(self, msg: CurveTiming) -> None:
        self.timing = msg.busy
        if not msg.busy:
            self.model_ready()  # a prompt that waited is answered now
        self.post_message(self.Changed())

    def on_reply_reading(self, msg: ReplyReading) -> None:
        if msg.job.view.is_attached:
            msg.job.view.show_reading(msg.done, msg.total)

    @guarded
    async def on_reply_finished(self, msg: ReplyFinished) -> None:
        """Save the reply, then show it as saved."""
        job, record = msg.job, msg.record
        await self._show_feed(job)  # the last frame's worth, before the engine's figures
        job.live.on_done(record.stats)
        if record.finish_reason == "interrupted":  # a server broke off: the text is kept
            self.notify(record.notice, title="Reply interrupted", severity="warning", timeout=10)
        elif record.notice:
            self.notify(record.notice, title="Context")
        message_id: int | None = None
        row = None
        try:
            message_id, row = self.save(job, record)
        finally:
            joined = await self.settle(job, record, message_id, row)
        self.post_message(self.Settled(joined))

    def save(self, job: ReplyJob, record: ReplyRecord) -> tuple[int | None, MessageRow | None]:
        """Save the reply under its question: its message id (None: not saved) and, when its
        chat is the one shown, its row."""
        service = self.host.service
        if service is None:
            return None, None
        try:
            message_id = service.finish(job.reply, record)
        except SamchatError as exc:
            self.host.error(exc, "Database")
            return None, None
        self.host.poke_indexer()  # the turn joins the static index for later replies
        if message_id is None or self.chat_id != job.chat_id:
            return message_id, None
        return message_id, service.store.message(message_id)

    async def settle(
        self, job: ReplyJob, record: ReplyRecord, message_id: int | None, row: MessageRow | None
    ) -> bool:
        """The reply was saved as `message_id` (None: not saved); `row`: the saved message, when
        its chat is the one shown. True: it joined the thread on screen."""
        if self.job is job:
            self.job = None
            self._stop_frames()
        view, shown = job.view, False
        if not view.is_attached:  # the user opened another chat meanwhile
            await view.drop_stream()
        else:
            # The engine's figures and provenance; the streamed view matches them.
            await view.finish(message_id, record.stats)
            if row is not None:
                self.chat_view.rows.append(row)
                shown = True
        if shown:
            self.refresh_branch_headers()
        self.query_one(StatsBar).show(job.live, record.finish_reason)
        if record.finish_reason == "cancelled":
            self.notify("stopped", timeout=2)
        self.last_live = job.live
        self.post_message(self.Changed())
        return shown

    def refresh_branch_headers(self) -> None:
        data = self.host.data
        if data is None:
            return
        try:
            branches = data.branches(self.chat_view.rows)
        except SamchatError:
            return
        self.chat_view.show_branches(branches)

    async def on_reply_failed(self, msg: ReplyFailed) -> None:
        if self.job is msg.job:
            self.job = None
            self._stop_frames()
        await msg.job.view.drop_stream()
        if msg.job.view.is_attached:
            await msg.job.view.remove()
        self.notify(msg.error, severity="error", title="Generation failed", timeout=10)
        self.post_message(self.Changed())

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
        if self.job is not None or view.role != "assistant" or stats is None:
            return
        live = LiveStats(0.0)
        live.tokens = stats.reply.tokens
        live.speeds = list(stats.speed_trace)
        live.on_done(stats)
        self.query_one(StatsBar).show(live, f"{stats.finish_reason} (stored)")
