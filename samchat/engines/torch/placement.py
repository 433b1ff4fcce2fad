"""The torch device and dtype a load asks for: CUDA first, then Apple MPS, then the CPU."""

from __future__ import annotations

from typing import Any

import torch

from samchat.engines.base import DEVICE_TYPES
from samchat.engines.registry import TORCH
from samchat.errors import ModelLoadError

DEVICES = ("auto", *DEVICE_TYPES)
FLOAT_DTYPES = ("auto", "float32", "float16", "bfloat16")  # the rest: packed CPU formats


def _mps_available() -> bool:
    backend: Any = getattr(torch.backends, "mps", None)
    return bool(backend is not None and backend.is_available())


def resolve_device(name: str) -> torch.device:
    if name not in DEVICES:
        raise ModelLoadError(f"unknown device {name!r}; use one of {', '.join(DEVICES)}")
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda asked for, but no CUDA GPU is visible; use cpu")
    if name == "mps" and not _mps_available():
        raise ModelLoadError("--device mps asked for, but Apple MPS is not available; use cpu")
    return torch.device(name)


def auto_device_type() -> str:
    """Where `--device auto` runs a torch model on this machine (the registry asks)."""
    return resolve_device("auto").type


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """A float dtype (int4, int8 and int4-requantized name the flat engine instead)."""
    if name not in FLOAT_DTYPES:
        names = ", ".join(("auto", *TORCH.dtypes))
        raise ModelLoadError(f"unknown dtype {name!r}; use one of {names}")
    if name != "auto":
        dtype: torch.dtype = getattr(torch, name)
        return dtype
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    # fp32 on CPU: half precision is slow there and changes greedy output.
    return torch.float32
