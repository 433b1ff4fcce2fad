"""A conversation's replies, apart from its view: the reply streaming now (from this widget's
own worker, shown once a frame from the job's feed), the one that waits for the model, the
engines' measurement after a first answer (a new prompt goes first), the timing of this
machine after a plain first reply, and saving each reply when it ends. It posts
Changed (the status follows) and Settled (a reply was saved and shown) to the screen."""

from __future__ import annotations

import dataclasses
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

from textual import work
from textual.message import Message
from textual.timer import Timer
from textual.widget import Widget
from textual.worker import get_current_worker

from samchat.chat.live_stats import LiveStats
from samchat.chat.service import PendingReply, ReplyRecord
from samchat.engines.engine_thread import ENGINE_THREAD
from samchat.errors import SamchatError
from samchat.tui.guard import guarded
from samchat.tui.reply_stream import stream_to
from samchat.tui.states import ModelState
from samchat.tui.widgets.message_view import MessageView
from samchat.tui.worker_messages import (
    CurveTiming,
    EngineTrial,
    ReplyFailed,
    ReplyFinished,
    ReplyJob,
    ReplyReading,
)

if TYPE_CHECKING:
    from samchat.chat.generator import Replies
    from samchat.decoding.params import SamplingParams
    from samchat.store import MessageRow
    from samchat.tui.host import ChatHost
    from samchat.tui.widgets.chat_view import ChatView
    from samchat.tui.widgets.stats_bar import StatsBar

# How often a streaming reply is shown: a frame's tokens in one update, so the UI's work stays
# ten updates a second whatever the engine's speed (on two cores it competes with the engine).
FRAME_S = 0.1


class Thread(Protocol):
    """What the replies need of the conversation they belong to."""

    chat_id: int | None  # the chat shown

    @property
    def chat_view(self) -> ChatView: ...

    @property
    def stats_bar(self) -> StatsBar: ...

    def refresh_branch_headers(self) -> None: ...


class ReplyController(Widget):
    """Not drawn: it owns the reply workers, the frames they are shown at, and the saving."""

    @dataclass
    class Changed(Message):
        """A reply started, waits, ended, or the machine is being timed: the status follows."""

    @dataclass
    class Settled(Message):
        """A reply was saved (or could not be) and shown; `joined`: it joined the thread on
        screen (the branch headers follow)."""

        joined: bool

    def __init__(self, host: ChatHost, thread: Thread) -> None:
        super().__init__()
        self.host = host  # the model that answers, and the sampling it answers with
        self.thread = thread
        self.job: ReplyJob | None = None  # the reply streaming now (until settled)
        self.pending: ReplyJob | None = None  # a reply waiting for the model
        self.timing = False  # this machine's costs are being measured (after a first reply)
        self.timing_stop = threading.Event()  # Esc, or a new prompt: the timing gives way
        self.measuring = ""  # what the engines' measurement does now ("": none runs)
        self.trial_stop = threading.Event()  # a new prompt, Esc or quit: it gives way
        self.last_live: LiveStats | None = None
        self._frames: Timer | None = None  # shows the streaming reply once a frame

    def on_mount(self) -> None:
        self._frames = self.set_interval(FRAME_S, self._show_frame, pause=True)

    async def start_reply(self, reply: PendingReply, model_name: str) -> None:
        """A streaming view for `reply`; generation starts now, or when the model is ready."""
        view = MessageView(
            message_id=None,
            role="assistant",
            content="",
            model=model_name,
            parent_id=reply.parent_id,
        )
        await self.thread.chat_view.add_view(view)
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
        if self.measuring:  # it gives way within a step; this reply then runs
            self.trial_stop.set()
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
        if self.measuring:  # the next answer measures again
            self.trial_stop.set()
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
        self.trial_stop.set()
        trial = getattr(self.host.lm, "trial", None)  # the child preparing weights ends too
        if trial is not None:
            trial.close()

    async def _drop_pending(self, job: ReplyJob) -> None:
        if job.view.is_attached:
            await job.view.finish(None, None)
            await job.view.remove()
        self.notify("the waiting prompt will not be answered", timeout=3)
        self.post_message(self.Changed())

    @work(thread=True, group="reply", exit_on_error=False)
    def run_reply(self, job: ReplyJob, gen: Replies, sampling: SamplingParams) -> None:
        """The chat service's stream, posted back to this widget; decoded on the process's
        engine thread, where the model was loaded (engine_thread.py says why)."""
        worker = get_current_worker()
        self.timing_stop.clear()
        ENGINE_THREAD.run(
            partial(
                stream_to,
                self.post_message,
                job,
                gen,
                sampling,
                lambda: worker.is_cancelled,
                lambda: worker.is_cancelled or self.timing_stop.is_set(),
                self.trial_stop,
            )
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
        self.thread.stats_bar.show(job.live, "streaming")

    def _stop_frames(self) -> None:
        if self._frames is not None and self.job is None:
            self._frames.pause()

    def on_curve_timing(self, msg: CurveTiming) -> None:
        self.timing = msg.busy
        if not msg.busy:
            self.model_ready()  # a prompt that waited is answered now
        self.post_message(self.Changed())

    def on_engine_trial(self, msg: EngineTrial) -> None:
        self.measuring = (msg.doing or "measuring") if msg.busy else ""
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
        if message_id is None or self.thread.chat_id != job.chat_id:
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
                self.thread.chat_view.rows.append(row)
                shown = True
        if shown:
            self.thread.refresh_branch_headers()
        self.thread.stats_bar.show(job.live, record.finish_reason)
        if record.finish_reason == "cancelled":
            self.notify("stopped", timeout=2)
        self.last_live = job.live
        self.post_message(self.Changed())
        return shown

    async def on_reply_failed(self, msg: ReplyFailed) -> None:
        if self.job is msg.job:
            self.job = None
            self._stop_frames()
        await msg.job.view.drop_stream()
        if msg.job.view.is_attached:
            await msg.job.view.remove()
        self.notify(msg.error, severity="error", title="Generation failed", timeout=10)
        self.post_message(self.Changed())
