"""How fast this machine reads memory, and how many weight bytes each engine reads in a
one-token step: a step's time set against its floor (`samchat bench engines`)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

READ_BYTES = 1 << 30  # larger than the caches, as a model's weights are
_ELEMENT = {"U8": 1, "I8": 1, "F16": 2, "BF16": 2, "F32": 4, "I32": 4, "I64": 8}
_TILES = (".t4", ".t8", ".tf", ".ts", ".tz")


def read_bandwidth(cache_dir: Path, runs: int = 5) -> float | None:
    """Bytes per second a read of READ_BYTES reaches on every thread torch uses (the flat
    engine's native read, the median of `runs`); None where the native forward does not build."""
    import torch

    from samchat.engines.flat.native import build

    if build.load(cache_dir) is not None:
        return None
    buf = torch.ones(READ_BYTES, dtype=torch.uint8)
    torch.ops.samchat_flat.read(buf)  # pages touched once before timing
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        torch.ops.samchat_flat.read(buf)
        times.append(time.perf_counter() - start)
    return READ_BYTES / statistics.median(times)


def gguf_step_bytes(path: Path) -> int:
    """The bytes of a GGUF's tensors a one-token step reads: all but the token embedding, of
    which it reads one row, unless the embedding is the output projection too."""
    from gguf import GGUFReader

    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    tied = "output.weight" not in sizes
    return sum(n for name, n in sizes.items() if name != "token_embd.weight" or tied)


def packed_step_bytes(packed: Path) -> int:
    """The bytes of a flat engine's packed file that a one-token step reads: every linear's
    tiles, scales and offsets, the output projection's too."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(packed), framework="pt") as f:
        for key in f.keys():  # noqa: SIM118 (safe_open is not iterable)
            if key.endswith(_TILES):
                part = f.get_slice(key)
                count = 1
                for n in part.get_shape():
                    count *= n
                total += count * _ELEMENT[part.get_dtype()]
    return total


def newest_packing(cache_dir: Path, model: Path) -> Path | None:
    """The packed file kept last for the GGUF at `model`, if any."""
    kept = sorted(
        (cache_dir / "packed").glob(f"{model.stem[:60]}-*.safetensors"),
        key=lambda p: p.stat().st_mtime,
    )
    return kept[-1] if kept else None
