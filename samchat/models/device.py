"""The devices and dtypes a load can ask for, and whether a GPU could be here: judged without
importing torch (the torch engine resolves them: samchat/engines/torch/placement.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from samchat.engines.base import DEVICE_TYPES
from samchat.engines.registry import KINDS

DEVICES = ("auto", *DEVICE_TYPES)
DTYPES = ("auto", *dict.fromkeys(dtype for kind in KINDS for dtype in kind.dtypes))


def accelerator_possible() -> bool:
    """Whether torch could find a GPU here, judged without importing it (the import is most
    of a short ask's start-up on a small CPU): an NVIDIA or AMD driver, or a Mac (Apple MPS)."""
    if sys.platform == "darwin":
        return True
    return any(Path(p).exists() for p in ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd"))
