"""Entry point used by the CLI when `samchat` runs without a sub-command."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from samchat.tui.app import SamchatApp

# The model options of the command line that the app hands to every model it loads.
MODEL_OPTIONS = ("dtype", "quantize", "trust_remote_code", "cuda_graphs")


def app_from_args(args: argparse.Namespace) -> SamchatApp:
    from samchat import paths
    from samchat.cli_options import store_path
    from samchat.tui.app import SamchatApp

    db_path = store_path(args)  # --data-dir: the store, and the static index next to it
    options: dict[str, Any] = {
        key: getattr(args, key) for key in MODEL_OPTIONS if getattr(args, key, None) is not None
    }
    return SamchatApp(
        model_source=getattr(args, "model", None),
        device=getattr(args, "device", None),
        engine=getattr(args, "engine", None),
        model_options=options,
        db_path=db_path,
        cache_dir=paths.cache_dir(),
    )


def run_tui(args: argparse.Namespace) -> int:
    app_from_args(args).run()
    return 0
