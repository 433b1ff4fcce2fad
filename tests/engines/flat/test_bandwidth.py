"""The yardsticks of `samchat bench engines`: the machine's read bandwidth (a native read of
every byte) and the weight bytes each engine reads in a one-token step."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from samchat.engines import bandwidth
from samchat.paths import model_cache_dir


def test_the_read_reads_every_byte() -> None:
    """The read's result mixes every word it read: a mark on the last page shows in it, so a
    read that stopped short (or skipped pages between threads) would be caught."""
    import torch

    from samchat.engines.flat.native import build

    assert build.load(model_cache_dir()) is None
    buf = torch.zeros(1 << 22, dtype=torch.uint8)
    assert torch.ops.samchat_flat.read(buf) == 0
    buf.view(torch.int32)[-1] = 5
    buf.view(torch.int32)[1000] = 3
    assert torch.ops.samchat_flat.read(buf) == 5 ^ 3
    assert (bandwidth.read_bandwidth(model_cache_dir(), runs=1) or 0) > 0


def test_step_bytes_count_what_a_step_reads(gguf_types: dict[str, Path], tmp_path: Path) -> None:
    """llama.cpp: every tensor but the token embedding (one row a step), which counts where it
    is the output too; the flat engine: its packed tiles, which hold the file's numbers in
    about the file's bytes."""
    from gguf import GGUFReader

    from samchat.engines.flat import packed

    path = gguf_types["Q4_0"]
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    step = bandwidth.gguf_step_bytes(path)
    if "output.weight" in sizes:
        assert step == sum(sizes.values()) - sizes["token_embd.weight"]
    else:
        assert step == sum(sizes.values())
    packed.load_flat(path, path.stem, "int4", tmp_path)
    kept = bandwidth.newest_packing(tmp_path, path)
    assert kept is not None
    tiles = bandwidth.packed_step_bytes(kept)
    norms = sum(int(np.prod(t.shape)) * 4 for t in GGUFReader(path).tensors if len(t.shape) == 1)
    assert 0.9 * (step - norms) < tiles < 1.2 * step  # Q4_0 and Q6_K in about their own bytes
