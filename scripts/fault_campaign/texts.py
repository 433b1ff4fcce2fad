"""The campaign's fake tokenizer and the random texts it writes (the children use them too)."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

WORDS = ("suffix", "automaton", "draft", "token", "verify", "tree", "model", "index")
FP = "fp"  # the fake tokenizer's fingerprint: bytes + 1, separator 0


def encode(text: str) -> list[int]:
    return [b + 1 for b in text.encode()]


def digest(text: str) -> str:
    """The hash an acknowledgement carries: a row read back must have the same."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_sources(src: Path, rng: random.Random, n: int) -> dict[str, str]:
    """`n` text files of random words under `src`, for an import: their texts by resolved path."""
    src.mkdir(parents=True, exist_ok=True)
    texts = {}
    for i in range(n):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(300, 3000)))
        path = src / f"f{i:03d}.txt"
        text = f"{words} file {i} of {src.name}"
        path.write_text(text)
        texts[str(path.resolve())] = text
    return texts
