"""Entry point used by the CLI when `samchat` runs without a sub-command."""

from __future__ import annotations

import argparse


def run_tui(args: argparse.Namespace) -> int:
    from samchat import paths
    from samchat.cli_options import store_path
    from samchat.tui.app import SamchatApp

    db_path = store_path(args)  # --data-dir: the store, and the static index next to it
    options = {
        key: getattr(args, key)
        for key in ("dtype", "quantize", "trust_remote_code")
        if getattr(args, key, None) is not None
    }
    app = SamchatApp(
        model_source=getattr(args, "model", None),
        device=getattr(args, "device", None),
        engine=getattr(args, "engine", None),
        model_options=options,
        db_path=db_path,
        cache_dir=paths.cache_dir(),
    )
    app.run()
    return 0
