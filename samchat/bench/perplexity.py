"""Perplexity of a text under one or several engine/dtype configurations of the same model
(`samchat bench perplexity`): the flat engine runs the GGUF's own quantized numbers, so it
should agree with llama.cpp on the same file."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np
import numpy.typing as npt

from samchat.engines.base import Engine
from samchat.errors import SamchatError

# Tokens read per forward, every row's logits returned: within any engine's batch.
CHUNK = 256


@dataclass
class Perplexity:
    perplexity: float
    tokens: int  # tokens predicted (each window's tokens but its first)
    # Each window's summed negative log-likelihood, in order: the paired differences between
    # methods, window by window, give the noise of a difference in perplexity.
    window_nll: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, float | int]:
        return {"perplexity": self.perplexity, "tokens": self.tokens}


class MethodFigures(TypedDict):
    """One configuration's figures in `samchat bench perplexity --json`, with what ran it."""

    perplexity: float
    tokens: int
    dtype: str
    engine: str  # the engine in words
    windows: int
    # The standard error of log(this / the first method's perplexity), from the windows'
    # paired differences; None for the first method or a single window.
    noise: float | None


def parse_setups(text: str) -> list[str]:
    """'llamacpp,flat/int4' -> configuration labels (ENGINE[/DTYPE]), checked (torch/int4
    is flat/int4, as `--engine torch --dtype int4` is)."""
    from samchat.bench.decode import dtype_problem, setup_label
    from samchat.engines.registry import engine_kind
    from samchat.models.device import DTYPES

    labels: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        engine, slash, dtype = part.partition("/")
        try:
            kind = engine_kind(engine)
        except KeyError:
            raise SamchatError(f"unknown engine {engine!r} in --methods {text!r}") from None
        if slash and dtype not in DTYPES:
            raise SamchatError(f"{part}: unknown dtype; use one of {', '.join(DTYPES)}")
        problem = dtype_problem(kind.name, dtype) if slash else None
        if problem:
            raise SamchatError(f"{part}: {problem}")
        labels.append(setup_label(kind.name, dtype if slash else "auto"))
    if not labels:
        raise SamchatError("--methods names no configuration; e.g. llamacpp,flat/int4")
    return list(dict.fromkeys(labels))


def _nll(logits: npt.NDArray[np.float32], targets: list[int]) -> float:
    rows = logits.astype(np.float64)
    top = rows.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(rows - top).sum(axis=1))
    picked = rows[np.arange(len(targets)), targets]
    return float((lse - picked).sum())


def perplexity(
    engine: Engine,
    ids: list[int],
    progress: Callable[[int], None] | None = None,
    window: int | None = None,
) -> Perplexity:
    """exp(mean negative log-likelihood) of the text's tokens, each predicted from all before it
    in its window: the text is cut into windows of `window` tokens (None: one window), each read
    from an empty cache, as llama.cpp's perplexity reads its chunks."""
    if len(ids) < 2:
        raise SamchatError("the text is shorter than two tokens")
    size = window or len(ids)
    if size < 2:
        raise SamchatError(f"a window of {size} tokens predicts nothing; use 2 or more")
    sums: list[float] = []
    n = 0
    try:
        for first in range(0, len(ids) - 1, size):
            piece = ids[first : first + size]
            if len(piece) < 2:  # a last token alone predicts nothing
                break
            sums.append(_window_nll(engine, piece, size))
            n += len(piece) - 1
            if progress is not None:
                progress(first + len(piece))
    finally:
        engine.reset()
    return Perplexity(math.exp(sum(sums) / n), n, sums)


def _window_nll(engine: Engine, ids: list[int], window: int) -> float:
    """The summed negative log-likelihood of ids[1:], read from an empty cache in pieces."""
    engine.reset()
    # Every window is read as a session reads a prompt of the window's length (a last, shorter
    # one too): from 256 tokens llama.cpp then keeps an F16 cache, as its own perplexity does
    # (its Q8_0 cache, for short reads, computes another model).
    engine.plan_read(0, window)
    total = 0.0
    for start in range(0, len(ids) - 1, CHUNK):
        chunk = ids[start : start + CHUNK]
        targets = ids[start + 1 : start + 1 + len(chunk)]
        logits = engine.prefill(chunk, logits=len(chunk))
        assert logits is not None
        total += _nll(logits[: len(targets)], targets)
    return total


def paired_noise(a: Perplexity, b: Perplexity) -> float | None:
    """The standard error of log(b / a) from the windows' paired differences (the same text, so
    the same windows), or None with fewer than two windows."""
    if len(a.window_nll) != len(b.window_nll) or len(a.window_nll) < 2 or a.tokens != b.tokens:
        return None
    diffs = [y - x for x, y in zip(a.window_nll, b.window_nll, strict=True)]
    mean = sum(diffs) / len(diffs)
    var = sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1)
    return math.sqrt(var * len(diffs)) / a.tokens
