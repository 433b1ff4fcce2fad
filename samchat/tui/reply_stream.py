"""The body of the conversation's reply worker: the chat service's stream of one reply. Text
and step figures go into the job's feed, which the UI takes once a frame; the rest (reading
progress, the end, failures) is posted as worker messages (post_message is thread-safe). After
a plain first reply, this machine's verification costs are timed once."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from samchat.chat.service import ReplyRecord, stream_reply
from samchat.errors import SamchatError
from samchat.tui.worker_messages import (
    CurveTiming,
    Notice,
    ReplyFailed,
    ReplyFinished,
    ReplyJob,
    ReplyReading,
)

if TYPE_CHECKING:
    from textual.message import Message

    from samchat.chat.generator import Replies
    from samchat.decoding.params import SamplingParams

Post = Callable[["Message"], object]


def stream_to(
    post: Post,
    job: ReplyJob,
    gen: Replies,
    sampling: SamplingParams,
    cancelled: Callable[[], bool],
    timing_stopped: Callable[[], bool] | None = None,
) -> None:
    """In a thread worker; `cancelled()`: the worker was cancelled (the app is closing);
    `timing_stopped()`: the timing after the reply gives way (Esc, or a new prompt)."""
    try:
        from samchat.decoding.events import PrefillProgress, StepStats, TextDelta

        events = stream_reply(gen, job.reply, sampling, job.cancel, job.live.started)
        timing = False
        feed = job.feed
        for ev in events:
            if isinstance(ev, TextDelta):
                pieces = [(text, source) for text, source in ev.pieces]
                feed.add_text(ev.text, pieces, ev.tokens, list(ev.sources), time.perf_counter())
            elif isinstance(ev, StepStats):
                feed.add_step(ev.forward_s, ev.draft_size == 0, time.perf_counter())
            elif isinstance(ev, PrefillProgress):
                post(ReplyReading(job, ev.done, ev.total))
            elif isinstance(ev, ReplyRecord):
                # Timing starts before the UI learns the reply is done, so that a prompt
                # sent meanwhile waits for it instead of racing it for the CPU.
                # Not after Esc: the user asked for quiet, and the next reply times it.
                timing = gen.curve_missing() and ev.finish_reason != "cancelled"
                if timing:
                    post(CurveTiming(True))
                post(ReplyFinished(job, ev))
        if timing:
            time_machine(post, gen, timing_stopped or cancelled)
    except SamchatError as exc:
        post(ReplyFailed(job, str(exc)))
    except Exception as exc:  # a decoder bug must not take the UI down
        post(ReplyFailed(job, f"{type(exc).__name__}: {exc}"))


def time_machine(post: Post, gen: Replies, cancelled: Callable[[], bool]) -> None:
    """After a plain first reply: time this machine once. Closing the app cancels the worker,
    which stops the timing at its next forward."""
    from samchat.engines.costs import MeasurementCancelled

    try:
        gen.measure_cost_curve(cancelled)
    except MeasurementCancelled:  # Esc, a new prompt or the app closing: the next reply times it
        pass
    except SamchatError as exc:  # failed: replies stay plain, and say so
        post(Notice(f"timing drafts failed: {exc}", "Decoder"))
    except Exception as exc:  # a measurement bug must not take the UI down
        post(Notice(f"timing drafts failed: {type(exc).__name__}: {exc}", "Decoder"))
    finally:
        post(CurveTiming(False))
