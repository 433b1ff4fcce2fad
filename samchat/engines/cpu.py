"""The CPU this process runs on: its model name and the features that decide kernels."""

from __future__ import annotations

import functools
import platform
from pathlib import Path

# Flags that change which kernels are fast (and, for AMX, which may crash in a VM).
RELEVANT = (
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512vbmi",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)


@functools.cache
def _cpuinfo() -> dict[str, str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor is enough
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def cpu_name() -> str:
    return _cpuinfo().get("model name") or platform.processor() or platform.machine()


def cpu_flags() -> list[str]:
    """The relevant flags this CPU reports (empty where /proc/cpuinfo is missing)."""
    flags = set(_cpuinfo().get("flags", "").split())
    return [f for f in RELEVANT if f in flags]
