"""Perplexity of a text under one or several engine/dtype configurations of the same model
(`samchat bench perplexity`): the flat engine runs the GGUF's own quantized numbers, so it
should agree with llama.cpp on the same file."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
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
    tokens: int  # tokens predicted (the text's tokens but the first)

    def to_dict(self) -> dict[str, float | int]:
        return {"perplexity": self.perplexity, "tokens": self.tokens}


class MethodFigures(TypedDict):
    """One configuration's figures in `samchat bench perplexity --json`, with what ran it."""

    perplexity: float
    tokens: int
    dtype: str
    engine: str  # the engine in words


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
    engine: Engine, ids: list[int], progress: Callable[[int], None] | None = None
) -> Perplexity:
    """exp(mean negative log-likelihood) of ids[1:], each token predicted from all before it
    (the text read in pieces, every row's logits kept)."""
    if len(ids) < 2:
        raise SamchatError("the text is shorter than two tokens")
    engine.reset()
    total = 0.0
    try:
        for start in range(0, len(ids) - 1, CHUNK):
            chunk = ids[start : start + CHUNK]
            targets = ids[start + 1 : start + 1 + len(chunk)]
            logits = engine.prefill(chunk, logits=len(chunk))
            assert logits is not None
            total += _nll(logits[: len(targets)], targets)
            if progress is not None:
                progress(start + len(chunk))
    finally:
        engine.reset()
    n = len(ids) - 1
    return Perplexity(math.exp(total / n), n)
