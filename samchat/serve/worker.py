"""The engine thread: one loaded model serves one request at a time, in arrival order.

Requests come in as Jobs; the thread streams each job's events back to the event loop that
asked (`loop.call_soon_threadsafe`). A job whose client left is skipped if it has not
started, and stopped at the engine's next step if it has (its cancel event).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

from samchat.engines.engine_thread import ENGINE_THREAD
from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.serve.protocol import ApiError

if TYPE_CHECKING:
    from samchat.chat.record import ReplyRecorder, StoredStats
    from samchat.decoding.events import Event, ReplyDone, TextDelta
    from samchat.decoding.params import SamplingParams

log = logging.getLogger(__name__)

# Streamed text goes to the event loop at most this often (the first piece at once): each post
# wakes the loop, whose work competes with the engine's threads for the CPU.
STREAM_FLUSH_S = 0.025

Generate = Callable[[list[Message], "SamplingParams", threading.Event], Iterator["Event"]]
# Work for the engine thread between requests; it stops when its argument returns True.
Idle = Callable[[Callable[[], bool]], None]


class Saver(Protocol):
    """Where finished replies go (--save); used from the engine thread only."""

    def save(self, messages: list[Message], done: ReplyDone, stats: StoredStats | None) -> int: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Finished:
    """A job's last event: the reply, and the chat it was saved in (--save)."""

    done: ReplyDone
    chat_id: int | None


Item: TypeAlias = "TextDelta | Finished | ApiError"  # what a job's queue carries


class Job:
    """One request: its messages and sampling, its cancel event, and the queue its events
    arrive on (in the asyncio loop that made it)."""

    def __init__(self, messages: list[Message], params: SamplingParams, stream: bool) -> None:
        self.messages = messages
        self.params = params
        self.stream = stream  # False: only the Finished event is sent back
        self.cancel = threading.Event()
        self.events: asyncio.Queue[Item] = asyncio.Queue()
        self._loop = asyncio.get_running_loop()

    def post(self, item: Item) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is listening
            self._loop.call_soon_threadsafe(self.events.put_nowait, item)


class EngineWorker:
    """Runs jobs one at a time in its own thread."""

    def __init__(
        self, generate: Generate, saver: Saver | None = None, idle: Idle | None = None
    ) -> None:
        self._generate = generate
        self._saver = saver
        self._idle = idle
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._current: Job | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="samchat-serve-engine", daemon=True)

    def start(self) -> EngineWorker:
        self._thread.start()
        return self

    def submit(self, job: Job) -> None:
        if self._stopping:
            raise ApiError(503, "the server is shutting down", kind="server_error")
        self._jobs.put(job)

    def stop_soon(self) -> None:
        """Refuse new jobs, cancel the running one and drop the queued ones (at shutdown)."""
        self._stopping = True
        current = self._current
        if current is not None:
            current.cancel.set()
            # Its client hears now, not after the engine's step in progress (a long read can
            # take a second): the connection closes and the shutdown does not wait for it.
            current.post(ApiError(503, "the server is shutting down", kind="server_error"))
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel.set()
                job.post(ApiError(503, "the server is shutting down", kind="server_error"))
        self._jobs.put(None)

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop, waiting up to `timeout` s for the step in progress; False if it goes on."""
        self.stop_soon()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        # Served on the process's engine thread, where the model was loaded (engine_thread.py
        # says why); before that thread is started (tests), on this one.
        ENGINE_THREAD.run(self._serve_jobs)

    def _serve_jobs(self) -> None:
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                if job.cancel.is_set():  # its client left while it waited
                    continue
                self._current = job
                if self._stopping:  # stop_soon() ran between get() and the line above
                    job.cancel.set()
                try:
                    self._serve(job)
                finally:
                    self._current = None
                if self._idle is not None and self._jobs.empty() and not self._stopping:
                    self._idle(self._wanted)
        finally:
            if self._saver is not None:
                self._saver.close()  # its store connection belongs to this thread

    def _wanted(self) -> bool:
        """Idle work gives way: a request waits, or the server stops."""
        return self._stopping or not self._jobs.empty()

    def _serve(self, job: Job) -> None:
        from samchat.chat.record import ReplyRecorder
        from samchat.decoding.events import ReplyDone, TextDelta

        recorder = ReplyRecorder()
        pending: list[TextDelta] = []
        posted = -STREAM_FLUSH_S  # the first piece goes out at once
        try:
            for event in self._generate(job.messages, job.params, job.cancel):
                if isinstance(event, TextDelta):
                    recorder.observe(event)
                    if job.stream:
                        pending.append(event)
                        now = time.perf_counter()
                        if now - posted >= STREAM_FLUSH_S or posted < 0:
                            job.post(_joined(pending))
                            pending = []
                            posted = now
                elif isinstance(event, ReplyDone):
                    if pending:
                        job.post(_joined(pending))
                        pending = []
                    chat_id = self._save(job, event, recorder)
                    job.post(Finished(event, chat_id))
                    _report(event)
        except SamchatError as exc:  # the messages do not fit, the template rejects them
            job.post(ApiError(400, str(exc)))
        except Exception as exc:
            log.exception("the engine failed")
            message = f"the engine failed: {type(exc).__name__}: {exc}"
            job.post(ApiError(500, message, kind="server_error"))

    def _save(self, job: Job, done: ReplyDone, recorder: ReplyRecorder) -> int | None:
        if self._saver is None or done.finish_reason == "cancelled":
            return None
        try:
            return self._saver.save(job.messages, done, recorder.stats(done))
        except Exception as exc:  # the reply still goes out; the history misses it
            print(f"[could not save the chat: {exc}]", file=sys.stderr, flush=True)
            return None


def _joined(deltas: list[TextDelta]) -> TextDelta:
    """Consecutive deltas as one."""
    if len(deltas) == 1:
        return deltas[0]
    from samchat.decoding.events import TextDelta

    return TextDelta(
        text="".join(d.text for d in deltas),
        token_ids=[t for d in deltas for t in d.token_ids],
        sources=[s for d in deltas for s in d.sources],
        pieces=tuple(p for d in deltas for p in d.pieces),
    )


def _report(done: ReplyDone) -> None:
    """One line per reply on stderr: what the engine did."""
    s = done.stats
    print(
        f"[reply: {s.tokens} tokens, {s.tokens_per_s:.1f} tok/s, MAT {s.mat:.2f}, "
        f"reused {s.reused_tokens}/{s.prompt_tokens} prompt tokens, {done.finish_reason}]",
        file=sys.stderr,
        flush=True,
    )
