"""One thread for the model work of a process that decodes off its main thread.

OpenMP (torch's kernels, the flat engine's native forward) gives every thread that starts
parallel work a pool of threads of its own, and once a process holds more of them than it has
CPUs it stops spinning between parallel regions: each region then waits for sleeping threads to
wake. A reply decoded on a fresh worker thread, after the model was loaded on another, ran at a
third of the speed of the same reply decoded on one thread (docs/benchmarks.md). So a front end
that works from several threads (the app's workers) runs every load, reply and timing here,
one at a time, on the same thread."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


class EngineThread:
    """Runs calls on one long-lived daemon thread, in the order they come, once started (the
    app's launcher starts it); before, or on that thread itself, a call runs where it is made."""

    def __init__(self, name: str = "samchat-engine") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Starts the thread now (else the first call does): it takes the scheduling priority
        of the thread that starts it."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()

    def run(self, fn: Callable[[], T]) -> T:
        """fn() on the engine thread, waited for: its result, or its exception raised here."""
        if self._thread is None or threading.current_thread() is self._thread:
            return fn()
        future: Future[T] = Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn())
            except BaseException as exc:  # raised again in the caller's thread, never lost
                future.set_exception(exc)

        self.start()  # again, should the thread have died
        self._calls.put(call)
        return future.result()

    def _serve(self) -> None:
        while True:
            self._calls.get()()


# The process's one engine thread.
ENGINE_THREAD = EngineThread()
