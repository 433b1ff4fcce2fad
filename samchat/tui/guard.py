"""Turn a store or engine error raised inside an action or handler into a notification."""

from __future__ import annotations

import functools
import inspect
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar, cast

from samchat.errors import SamchatError

F = TypeVar("F", bound=Callable[..., Any])
EXPECTED = (SamchatError, sqlite3.Error, OSError)


def _report(owner: Any, exc: BaseException) -> None:
    owner.notify(str(exc) or type(exc).__name__, severity="error", title="Error", timeout=10)


def guarded(fn: F) -> F:
    """E.g. a chat deleted by another samchat process, or a database that is locked: the
    action stops with a notice instead of taking the app down."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(self, *args, **kwargs)
            except EXPECTED as exc:
                _report(self, exc)
                return None

        return cast(F, run_async)

    @functools.wraps(fn)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except EXPECTED as exc:
            _report(self, exc)
            return None

    return cast(F, run)
