"""Choosing the device and dtype: CUDA first, then Apple MPS, then the CPU."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from samchat.engines.base import DEVICE_TYPES
from samchat.errors import ModelLoadError

DEVICES = ("auto", *DEVICE_TYPES)
# int4 / int8: weight-only formats of the torch engine on the CPU (engines/torch/quant.py).
WEIGHT_FORMATS = ("int4", "int8")
DTYPES = ("auto", "float32", "float16", "bfloat16", *WEIGHT_FORMATS)


def accelerator_possible() -> bool:
    """Whether torch could find a GPU here, judged without importing it (the import is most
    of a short ask's start-up on a small CPU): an NVIDIA or AMD driver, or a Mac (Apple MPS)."""
    if sys.platform == "darwin":
        return True
    return any(Path(p).exists() for p in ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd"))


def _mps_available(torch: Any) -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(name: str) -> Any:
    import torch

    if name not in DEVICES:
        raise ModelLoadError(f"unknown device {name!r}; use one of {', '.join(DEVICES)}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available(torch):
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda asked for, but no CUDA GPU is visible; use cpu")
    if name == "mps" and not _mps_available(torch):
        raise ModelLoadError("--device mps asked for, but Apple MPS is not available; use cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: Any) -> Any:
    import torch

    if name not in DTYPES or name in WEIGHT_FORMATS:
        raise ModelLoadError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}")
    if name != "auto":
        return getattr(torch, name)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    # fp32 on CPU: half precision is slow there and changes greedy output.
    return torch.float32


def _cgroup_room() -> int | None:
    """What the cgroup (v2) this process runs in still lets it allocate, or None if unlimited."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def available_memory() -> int | None:
    """Bytes of memory this process can still use (MemAvailable, capped by a container's
    limit), or None when the system does not say."""
    room: int | None = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                room = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        room = None
    if room is None:
        try:
            room = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            room = None
    cgroup = _cgroup_room()
    if cgroup is not None:
        room = cgroup if room is None else min(room, cgroup)
    return room
