"""Entry point used by the CLI when `samchat` runs without a sub-command."""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from samchat.tui.app import SamchatApp

UI_NICE = 19  # the UI thread's niceness: it draws with what the engine leaves of the cores


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
    """Starts the engine thread at this thread's priority, then lowers this (the UI's) thread's:
    where the engine's threads fill every core, drawing the app otherwise takes turns with them
    and stalls each parallel step (docs/benchmarks.md); the UI still gets the cores they leave."""
    import os
    import threading

    from samchat.engines.engine_thread import ENGINE_THREAD

    ENGINE_THREAD.start()
    if hasattr(os, "setpriority"):
        with contextlib.suppress(OSError):  # a platform that does not set it per thread
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), UI_NICE)


def run_tui(args: argparse.Namespace) -> int:
    app = app_from_args(args)
    give_way_to_engine()
    app.run()
    return 0
