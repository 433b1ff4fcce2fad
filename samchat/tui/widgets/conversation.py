"""The open chat's conversation: its messages (a ChatView, the legend of the provenance colours
and the stats bar of the reply's figures) and the reply streaming into it from this widget's
own worker, or waiting for the model. It saves nothing: a finished reply goes up as ReplyDone,
and the chat screen saves it and hands it back to `settle`."""

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
from textual.widgets import Static
from textual.worker import get_current_worker

from samchat.chat.live_stats import LiveStats
from samchat.chat.service import PendingReply, ReplyRecord
from samchat.chat.shown_stats import ShownStats
from samchat.tui.code_blocks import code_blocks
from samchat.tui.guard import guarded
from samchat.tui.reply_stream import stream_to
from samchat.tui.screens.dialogs import PickScreen
from samchat.tui.states import ModelState
from samchat.tui.widgets.chat_view import ChatView
from samchat.tui.widgets.message_view import MessageView, legend_content
from samchat.tui.widgets.stats_bar import StatsBar
from samchat.tui.worker_messages import (
    CurveTiming,
    ReplyDelta,
    ReplyFailed,
    ReplyFinished,
    ReplyJob,
    ReplyReading,
    ReplyStep,
)

if TYPE_CHECKING:
    from samchat.chat.generator import Replies
    from samchat.decoding.params import SamplingParams
    from samchat.store import MessageRow
    from samchat.tui.host import ChatHost


class Conversation(Vertical):
    @dataclass
    class Changed(Message):
        """A reply started, waits, ended, or the machine is being timed: the status follows."""

    @dataclass
    class ReplyDone(Message):
        """A reply is complete (or stopped): save it, then hand it back to `settle`. The
        conversation stays busy until then."""

        job: ReplyJob
        record: ReplyRecord

    def __init__(self, host: ChatHost, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.host = host  # the model that answers, and the sampling it answers with
        self.job: ReplyJob | None = None  # the reply streaming now (until settled)
        self.pending: ReplyJob | None = None  # a reply waiting for the model
        self.timing = False  # this machine's costs are being measured (after a first reply)
        self.timing_stop = threading.Event()  # Esc, or a new prompt: the timing gives way
        self.last_live: LiveStats | None = None

    def compose(self) -> ComposeResult:
        yield ChatView(id="chat-view")
        yield Static(legend_content(), id="legend")
        yield StatsBar(id="stats-bar")

    @property
    def chat_view(self) -> ChatView:
        return self.query_one("#chat-view", ChatView)

    @property
    def busy(self) -> bool:
        return self.job is not None or self.pending is not None

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
            await job.view.finish(None, ShownStats())
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

    async def on_reply_delta(self, msg: ReplyDelta) -> None:
        msg.job.live.on_delta(msg.n, msg.sources, msg.t)
        if msg.job.view.is_attached:
            await msg.job.view.append(msg.text, msg.pieces)
        self.query_one(StatsBar).show(msg.job.live, "streaming")

    def on_curve_timing(self, msg: CurveTiming) -> None:
        self.timing = msg.busy
        if not msg.busy:
            self.model_ready()  # a prompt that waited is answered now
        self.post_message(self.Changed())

    def on_reply_reading(self, msg: ReplyReading) -> None:
        if msg.job.view.is_attached:
            msg.job.view.show_reading(msg.done, msg.total)

    def on_reply_step(self, msg: ReplyStep) -> None:
        msg.job.live.on_step(msg.forward_s, msg.plain)

    def on_reply_finished(self, msg: ReplyFinished) -> None:
        job, record = msg.job, msg.record
        job.live.on_done(ShownStats.of(record.stats))
        if record.finish_reason == "interrupted":  # a server broke off: the text is kept
            self.notify(record.notice, title="Reply interrupted", severity="warning", timeout=10)
        elif record.notice:
            self.notify(record.notice, title="Context")
        self.post_message(self.ReplyDone(job, record))

    async def settle(
        self, job: ReplyJob, record: ReplyRecord, message_id: int | None, row: MessageRow | None
    ) -> bool:
        """The reply was saved as `message_id` (None: not saved); `row`: the saved message, when
        its chat is the one shown. True: it joined the thread on screen."""
        if self.job is job:
            self.job = None
        view, shown = job.view, False
        if not view.is_attached:  # the user opened another chat meanwhile
            await view.drop_stream()
        else:
            # The engine's figures and provenance; the streamed view matches them.
            await view.finish(message_id, ShownStats.of(record.stats))
            if row is not None:
                self.chat_view.rows.append(row)
                shown = True
        self.query_one(StatsBar).show(job.live, record.finish_reason)
        if record.finish_reason == "cancelled":
            self.notify("stopped", timeout=2)
        self.last_live = job.live
        self.post_message(self.Changed())
        return shown

    async def on_reply_failed(self, msg: ReplyFailed) -> None:
        if self.job is msg.job:
            self.job = None
        await msg.job.view.drop_stream()
        if msg.job.view.is_attached:
            await msg.job.view.remove()
        self.notify(msg.error, severity="error", title="Generation failed", timeout=10)
        self.post_message(self.Changed())

    # -- the messages shown --------------------------------------------------------------------

    def target_view(self, role: str | None = None) -> MessageView | None:
        """The focused message if it fits, else the newest message of `role`."""
        focused = self.screen.focused
        if isinstance(focused, MessageView) and (role is None or focused.role == role):
            return focused
        return self.chat_view.last_view(role)

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

    def toggle_provenance(self) -> None:
        on_now = not self.chat_view.has_class("-provenance")
        if on_now:  # streaming replies skip it while hidden
            for view in self.chat_view.views():
                view.refresh_provenance()
        self.chat_view.set_class(on_now, "-provenance")
        self.query_one("#legend").display = on_now

    def toggle_stats(self) -> None:
        self.chat_view.toggle_class("-show-stats")

    async def step_message(self, step: int) -> bool:
        """Focus the previous (-1) or next (1) message; False past the newest one."""
        views = self.chat_view.views()
        if not views:
            return True
        focused = self.screen.focused
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
            return False
        views[target].focus()
        views[target].scroll_visible(animate=False)
        return True

    async def load_earlier(self) -> None:
        if not await self.chat_view.load_earlier():
            self.notify("this is the start of the chat", timeout=2)

    @guarded
    def on_message_view_focused(self, event: MessageView.Focused) -> None:
        """A finished reply shows its stored figures (and speed trace) in the stats bar."""
        view = event.view
        stats = view.stats
        if self.job is not None or view.role != "assistant" or not stats.present:
            return
        live = LiveStats(0.0)
        live.tokens = stats.tokens
        live.speeds = list(stats.speed_trace)
        live.on_done(stats)
        self.query_one(StatsBar).show(live, f"{stats.finish_reason} (stored)")
