"""How fast this machine reads memory, and how many weight bytes each engine reads in a
one-token step: a step's time set against its floor (`samchat bench engines`)."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

READ_BYTES = 1 << 30  # larger than the caches, as a model's weights are


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
    """The bytes of a flat engine's kept file that a one-token step reads: every linear's
    tiles, scales and offsets, the output projection's too."""
    from samchat.engines.flat import packfile
    from samchat.engines.flat.quant import is_tile_part

    _, tensors = packfile.read(packed)
    return sum(t.numel() * t.element_size() for k, t in tensors.items() if is_tile_part(k))


def newest_packing(cache_dir: Path, model: Path) -> Path | None:
    """The flat engine's file kept last for the GGUF at `model`, if any."""
    kept = sorted(
        (cache_dir / "packed").glob(f"{model.stem[:60]}-*.flat"), key=lambda p: p.stat().st_mtime
    )
    return kept[-1] if kept else None


def step_bytes(engine: str, model: Path, cache_dir: Path) -> int | None:
    """The weight bytes `engine` reads in a one-token step of the GGUF at `model`: the file's
    for llama.cpp, the kept tiles' for the flat engine (None before it has packed them, or for
    another engine)."""
    if engine == "llamacpp":
        return gguf_step_bytes(model)
    if engine == "flat":
        packed = newest_packing(cache_dir, model)
        return None if packed is None else packed_step_bytes(packed)
    return None
