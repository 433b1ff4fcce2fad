"""Run in a process of its own (the native forward loads once per process): every tiled linear
of the GGUF files named on the command line against an independent reference, the file's
dequantized weights in float64, on whatever build this process's environment asks for
(SAMCHAT_NATIVE_ARCH). Quantized tiles are held to the same activations rounded to 8 bits per
32 or 256 as llama.cpp rounds them (its Q8_0, Q8_1 and Q8_K), float tiles to the float32
inputs; both within TOLERANCE of the sum of the products' magnitudes. The first 1, 2, 3, 5 and
8 rows of a 9-row product, taken alone, must equal its rows exactly, on one thread and on
every core (each count takes other kernels: tiles and rows per pass differ). Prints "ok" or
what differs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from samchat.engines.flat import quant
from samchat.engines.flat.gguf_weights import decode
from samchat.engines.flat.native import build

# float32 sums of a few hundred terms, in a fixed order: about 1e-7 relative here; a wrong
# nibble, scale or offset moves a result by far more.
TOLERANCE = 2e-6


def rounded(x: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Each row rounded to 8 bits per 32 as llama.cpp's Q8_0 and Q8_1 round it: by 127 / amax,
    with d = amax / 127 kept as float16. Also Q8_1's s per 32, d * sum(q) kept as float16."""
    g = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(g).max(-1)
    d = (amax / np.float32(127)).astype(np.float32)
    inv = (np.float32(127) / np.where(amax > 0, amax, 1)).astype(np.float32)
    q = np.rint(g * np.where(amax > 0, inv, 0)[..., None])
    s = (d * q.sum(-1).astype(np.float32)).astype(np.float16).astype(np.float64)
    d16 = d.astype(np.float16).astype(np.float64)
    return (q * d16[..., None]).reshape(x.shape), s


def rounded_k(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each row rounded to 8 bits per 256 as llama.cpp's Q8_K rounds it (for the K-quants)."""
    g = x.reshape(x.shape[0], -1, 256)
    at = np.abs(g).argmax(-1)
    top = np.take_along_axis(g, at[..., None], -1)[..., 0]
    inv = (np.float32(-127) / top).astype(np.float32)
    d = (np.float32(1) / inv).astype(np.float32)
    q = np.minimum(np.rint(g * inv[..., None]), 127)
    return (q * d[..., None].astype(np.float64)).reshape(x.shape)


def run(x: np.ndarray[Any, Any], kind: int, *held: torch.Tensor) -> np.ndarray[Any, Any]:
    out = torch.ops.samchat_flat.linear(torch.from_numpy(x), kind, *held)
    return np.asarray(out.numpy())


def check(path: Path) -> list[str]:
    from gguf import GGUFReader

    problems: list[str] = []
    rng = np.random.default_rng(3)
    for t in GGUFReader(path).tensors:
        if len(t.shape) < 2:
            continue
        w = decode(t)
        kind, held = quant.tiles([w])
        q = held.get("t4", held.get("t8", held.get("tf")))
        s, z = held.get("ts", torch.empty(0)), held.get("tz", torch.empty(0))
        x = rng.standard_normal((9, w.shape[1])).astype(np.float32)
        y = run(x, kind, q, s, z)
        base = quant.base_kind(kind)
        k256 = base in (quant.TILES4K, quant.TILES8K)
        wd = w.dequantize().astype(np.float64)
        if base == quant.TILESF:
            xs = x.astype(np.float64)
        elif k256:
            xs = rounded_k(x)
        else:
            xs, sums = rounded(x)
        ref, size = xs @ wd.T, np.abs(xs) @ np.abs(wd).T
        if w.kind in ("Q4_1", "Q5_1"):  # offsets times Q8_1's s, not times d * sum(q)
            per = w.offset.shape[1] // sums.shape[1]
            offsets = w.offset[:, ::per].astype(np.float64)  # (outputs, cols / 32)
            exact = xs.reshape(len(xs), -1, 32).sum(-1)
            ref += (sums - exact) @ offsets.T
        err = float(np.max(np.abs(y - ref) / np.maximum(size, 1e-30)))
        if err > TOLERANCE:
            problems.append(f"{path.name} {t.name} ({w.kind}): {err:.2e} off")
        threads = torch.get_num_threads()
        for n in (1, os.cpu_count() or 1):
            torch.set_num_threads(n)
            for k in (1, 2, 3, 5, 8):
                if not np.array_equal(run(x[:k], kind, q, s, z), y[:k]):
                    problems.append(f"{path.name} {t.name}: {k} rows on {n} threads differ")
        torch.set_num_threads(threads)
    return problems


def main(paths: list[str]) -> int:
    why = build.load(Path(os.environ["SAMCHAT_MODEL_CACHE"]))
    if why is not None:
        print(f"no native build: {why}")
        return 1
    problems = [p for path in paths for p in check(Path(path))]
    print("\n".join(problems) if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
