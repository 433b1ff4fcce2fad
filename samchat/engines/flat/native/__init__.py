"""The lean forward's native core: forward.cpp, its build (build.py) and its call (forward.py).

Importing this package imports no torch: the engine choice asks it which forward would run."""

from __future__ import annotations

import os
from pathlib import Path

# SAMCHAT_NATIVE_FORWARD=0 runs the Python forward (build.py reads it too).
SWITCH = "SAMCHAT_NATIVE_FORWARD"


def expected_forward(model_cache: Path) -> str:
    """ "native" where a compiled core is kept in model_cache (and not switched off), else
    "python": the forward the flat engine would run here."""
    if os.environ.get(SWITCH, "1") == "0":
        return "python"
    return "native" if any((model_cache / "native").glob("lean-*.so")) else "python"
