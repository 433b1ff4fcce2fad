"""The body of the conversation's reply worker: the chat service's stream of one reply. Text
and step figures go into the job's feed, which the UI takes once a frame; the rest (reading
progress, the end, failures) is posted as worker messages (post_message is thread-safe). After
a first answer, the engines are measured for a model that has no record yet (giving way to the
next prompt: engine_trial.py), and after a plain reply this machine's verification costs are
timed once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from samchat.chat.service import ReplyRecord, stream_reply
from samchat.errors import SamchatError
from samchat.tui.worker_messages import (
    CurveTiming,
    EngineSwitch,
    EngineTrial,
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
    from samchat.models.engine_trial import Trial

Post = Callable[["Message"], object]


def stream_to(
    post: Post,
    job: ReplyJob,
    gen: Replies,
    sampling: SamplingParams,
    cancelled: Callable[[], bool],
    timing_stopped: Callable[[], bool] | None = None,
    trial_stop: threading.Event | None = None,
) -> None:
    """In a thread worker; `cancelled()`: the worker was cancelled (the app is closing);
    `timing_stopped()`: the timing after the reply gives way (Esc, or a new prompt);
    `trial_stop` set: the engines' measurement after it does (a new prompt, Esc, quit)."""
    try:
        from samchat.decoding.events import PrefillProgress, StepStats, TextDelta

        events = stream_reply(gen, job.reply, sampling, job.cancel, job.live.started)
        timing, trial = False, None
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
                answered = ev.finish_reason != "cancelled"
                trial = owed_trial(gen) if answered and trial_stop is not None else None
                timing = trial is None and gen.curve_missing() and answered
                if timing:
                    post(CurveTiming(True))
                if trial is not None and trial_stop is not None:
                    trial_stop.clear()  # before the UI can send the next prompt, which sets it
                    post(EngineTrial(True))
                post(ReplyFinished(job, ev))
        if trial is not None and trial_stop is not None:
            stop = trial_stop
            measure_engines(post, gen, trial, lambda: cancelled() or stop.is_set())
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


def owed_trial(gen: Replies) -> Trial | None:
    """The engines' measurement the model that answered still owes (none for a remote one)."""
    from samchat.models.loader import LoadedModel

    return gen.lm.trial if isinstance(gen.lm, LoadedModel) else None


def measure_engines(post: Post, gen: Replies, trial: Trial, wanted: Callable[[], bool]) -> None:
    """After an answer, on the engine thread: the engines measured and the result kept; where
    another one is faster, replies come from it from the next one on (EngineSwitch). A prompt,
    Esc or quit abandons it (wanted()), and the next answer starts it again."""
    from samchat.chat.generator import Generator
    from samchat.engines.costs import MeasurementCancelled
    from samchat.models.engine_choice import why
    from samchat.models.loader import LoadedModel

    def doing(text: str) -> None:
        post(EngineTrial(True, text))

    lm = gen.lm
    try:
        if not isinstance(gen, Generator) or not isinstance(lm, LoadedModel):
            return
        try:
            result = trial.run(lm, wanted, doing)
        except MeasurementCancelled:
            return
        except SamchatError as exc:  # not tried again: this model stays on its engine
            lm.trial = None
            post(Notice(f"measuring the engines failed: {exc}", "Engine"))
            return
        lm.trial = None
        faster = result.faster
        if faster is None:
            lm.engine_note = why(trial.spec, lm.engine, trial.cache_dir)
        else:
            faster.engine_note = why(trial.spec, faster.engine, trial.cache_dir)
            switched = Generator(
                faster, gen.decoding, gen.indexer, gen.cost_curve, gen.cache_dir, False
            )
            switched.prepare()
            post(
                EngineSwitch(switched, f"replies now run on {faster.engine}: {faster.engine_note}")
            )
    finally:
        post(EngineTrial(False))
