"""A private asyncio loop that the synchronous front ends drive from their own thread, so that
a network call can be abandoned at once: cancelling its task drops the connection even while
the server is silent (a blocked read in a thread cannot be interrupted)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

POLL_S = 0.05  # how often a waiting call looks at its cancel flag
T = TypeVar("T")


class Cancelled(Exception):
    """The caller's cancel flag was set while a call was waiting."""


def _retrieve(task: asyncio.Future[T]) -> None:
    """Mark a task's exception as seen: a Ctrl-C raised inside it is handled by the caller,
    and asyncio would otherwise print it again as "never retrieved"."""
    if not task.cancelled():
        task.exception()


async def _unless_cancelled(step: Awaitable[T], cancelled: Callable[[], bool]) -> T:
    task = asyncio.ensure_future(step)
    task.add_done_callback(_retrieve)
    while not task.done():
        if cancelled():
            task.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):  # not a Ctrl-C
                await task
            raise Cancelled
        await asyncio.wait({task}, timeout=POLL_S)
    return task.result()


class PrivateLoop:
    """`with PrivateLoop() as aio: aio.run(coroutine, cancelled)`; on leaving, what is left
    running is cancelled and the closers given to `closing` run, whatever happened."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._closers: list[Callable[[], Awaitable[object]]] = []

    def __enter__(self) -> PrivateLoop:
        return self

    def closing(self, closer: Callable[[], Awaitable[object]]) -> None:
        self._closers.append(closer)

    def run(self, step: Awaitable[T], cancelled: Callable[[], bool]) -> T:
        """`step`'s result; Cancelled as soon as `cancelled()` is true."""
        task = self.loop.create_task(_unless_cancelled(step, cancelled))
        task.add_done_callback(_retrieve)
        return self.loop.run_until_complete(task)

    def __exit__(self, *exc: object) -> None:
        # Cleanup failures are not the caller's problem; a Ctrl-C during cleanup is, so it
        # propagates (Exception and CancelledError only are suppressed here).
        loop = self.loop
        quiet = (Exception, asyncio.CancelledError)
        try:
            with contextlib.suppress(*quiet):
                left = asyncio.all_tasks(loop)  # whatever a Ctrl-C left running
                for task in left:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            for closer in reversed(self._closers):
                with contextlib.suppress(*quiet):
                    loop.run_until_complete(closer())
            with contextlib.suppress(*quiet):
                loop.run_until_complete(loop.shutdown_default_executor())  # its DNS thread
        finally:
            with contextlib.suppress(RuntimeError):  # still running: a Ctrl-C stopped it mid-run
                loop.close()
