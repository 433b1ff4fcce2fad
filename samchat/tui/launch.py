"""Entry point used by the CLI when `samchat` runs without a sub-command."""

from __future__ import annotations

import argparse
from pathlib import Path


def run_tui(args: argparse.Namespace) -> int:
    from samchat.tui.app import SamchatApp

    data_dir = getattr(args, "data_dir", None)
    db_path = Path(data_dir).expanduser() / "samchat.db" if data_dir else None
    app = SamchatApp(
        db_path=db_path,
        model_source=getattr(args, "model", None),
        device=getattr(args, "device", None),
    )
    app.run()
    return 0
