"""Entry point used by the CLI when `samchat` runs without a sub-command."""

from __future__ import annotations

import argparse
import contextlib
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


def give_way_to_engine() -> None:
    """Starts the engine thread at this thread's priority, then puts this (the UI's) thread
    below it: where the engine's threads fill every core, drawing the app otherwise takes turns
    with them and stalls each parallel step (docs/benchmarks.md). Linux's idle policy lets a
    waking engine thread take the core back at once (a lowered niceness still lets the UI run
    out its time slice); elsewhere the niceness is lowered. The UI draws with what they leave."""
    import os
    import threading

    from samchat.engines.engine_thread import ENGINE_THREAD

    ENGINE_THREAD.start()
    me = threading.get_native_id()
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        with contextlib.suppress(OSError):
            os.sched_setscheduler(me, os.SCHED_IDLE, os.sched_param(0))
            return
    if hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):  # a platform that does not set it per thread
            os.setpriority(os.PRIO_PROCESS, me, UI_NICE)


def run_tui(args: argparse.Namespace) -> int:
    app = app_from_args(args)
    give_way_to_engine()
    app.run()
    return 0
