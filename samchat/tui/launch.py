"""Entry point used by the CLI when `samchat` runs without a sub-command."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from samchat.tui.app import SamchatApp

UI_NICE = 19  # the UI thread's niceness where the idle policy is not to be had


def app_from_args(args: argparse.Namespace) -> SamchatApp:
    """The app, with the model the command line names (config.toml's fills the rest)."""
    from samchat import paths
    from samchat.chat.config import Config, ConfigError, load_config
    from samchat.cli_options import spec_from_args, store_path
    from samchat.tui.app import SamchatApp

    db_path = store_path(args)  # --data-dir: the store, and the static index next to it
    config: Config | None = None
    with contextlib.suppress(ConfigError):  # the app reads it again and shows the problem
        config = load_config()
    # As named: the app resolves an engine left to auto at each load (never into config.toml).
    spec = spec_from_args(args, config)
    return SamchatApp(spec=spec, config=config, db_path=db_path, cache_dir=paths.cache_dir())


@contextlib.contextmanager
def give_way_to_engine() -> Iterator[None]:
    """While inside: the engine thread started at this thread's priority, and this (the UI's)
    thread below it: where the engine's threads fill every core, drawing the app otherwise takes
    turns with them and stalls each parallel step (docs/benchmarks.md). Linux's idle policy lets
    a waking engine thread take the core back at once (a lowered niceness still lets the UI run
    out its time slice); elsewhere the niceness is lowered. The thread's own priority comes back
    after: processes it starts later (a test run's) would inherit it and starve."""
    import os
    import threading

    from samchat.engines.engine_thread import ENGINE_THREAD

    ENGINE_THREAD.start()
    me = threading.get_native_id()
    undo: Callable[[], None] | None = None
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            policy, param = os.sched_getscheduler(me), os.sched_getparam(me)
            os.sched_setscheduler(me, os.SCHED_IDLE, os.sched_param(0))
            undo = partial(os.sched_setscheduler, me, policy, param)
    if undo is None and hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):  # a platform that does not set it per thread
            nice = os.getpriority(os.PRIO_PROCESS, me)
            os.setpriority(os.PRIO_PROCESS, me, UI_NICE)
            undo = partial(os.setpriority, os.PRIO_PROCESS, me, nice)
    try:
        yield
    finally:
        if undo is not None:
            with contextlib.suppress(OSError):  # raising it again may need a privilege
                undo()


def run_tui(args: argparse.Namespace) -> int:
    app = app_from_args(args)
    with give_way_to_engine():
        app.run()
    return 0
