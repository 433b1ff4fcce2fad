"""`--dtype auto` for the torch engine on a CPU with bfloat16 instructions: float32 or bfloat16,
whichever this machine is expected to decode faster in while drafting stays lossless. Measured
once per CPU, torch version and model (one-row step time and cost curve of each dtype), then
cached; the weights are converted once per process."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import random
import statistics
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from samchat.decoding.budget import best_sequence_length
from samchat.engines.cpu import cpu_flags, cpu_name

log = logging.getLogger(__name__)

# CPU flags whose bfloat16 kernels can beat float32 (without them bfloat16 is emulated).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# Both dtypes are priced at one acceptance rate (the prior for an 8-token match) and draft cap:
# what matters is the shape of each curve, not the text.
REFERENCE_RATE = 0.7
REFERENCE_CAP = 16
# bfloat16 must win by this much: near a tie, noise would flip the choice from run to run, and
# float32 also verifies trees.
MARGIN = 1.05
VERSION = 1

_VERDICTS: dict[str, Verdict] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Verdict:
    """The dtype taken and why: per dtype, the one-row step (ms) and the expected tokens/s."""

    dtype: str
    step_ms: dict[str, float]
    expected: dict[str, float]
    note: str = ""

    def describe(self) -> str:
        figures = ", ".join(
            f"{d} {self.expected.get(d, 0.0):.0f} tok/s ({ms:.1f} ms a step)"
            for d, ms in self.step_ms.items()
        )
        why = f"; {self.note}" if self.note else ""
        return f"{self.dtype} (expected with drafts: {figures}{why})"


def has_bf16_kernels() -> bool:
    """This CPU has bfloat16 instructions (so --dtype auto measures bfloat16 too)."""
    return bool(set(BF16_FLAGS) & set(cpu_flags()))


def wants_choice(lm: Any) -> bool:
    """Whether lm is a float32 torch model loaded with --dtype auto on a CPU with bf16 kernels."""
    return bool(
        getattr(lm, "auto_dtype", False)
        and getattr(lm, "engine", "torch") == "torch"
        and lm.dtype == "float32"
        and lm.device.type == "cpu"
        and has_bf16_kernels()
    )


def _about(lm: Any) -> dict[str, str]:
    params = sum(p.numel() for p in lm.model.parameters())
    return {
        "model": str(lm.name),
        "source": str(lm.source),
        "shape": f"{type(lm.model).__name__}, {params} parameters",
        "cpu": cpu_name(),
        "flags": " ".join(cpu_flags()),
        "torch": torch.__version__,
    }


def _key(about: dict[str, str]) -> str:
    return hashlib.sha256("|".join(about.values()).encode()).hexdigest()[:16]


def fit_dtype(lm: Any, cache_dir: Path | None) -> Verdict | None:
    """Settle --dtype auto for lm (in place: its weights and `dtype`), measuring the first time
    on this machine; None where there is nothing to choose."""
    if not wants_choice(lm):
        return None
    with _LOCK:  # one measurement at a time, and one conversion per model
        if not wants_choice(lm):  # another session converted it meanwhile
            return None
        about = _about(lm)
        key = _key(about)
        path = cache_dir / "dtype" / f"{key}.json" if cache_dir is not None else None
        verdict = _VERDICTS.get(key) or _load(path)
        half = None
        if verdict is None:
            verdict, half = _measure(lm, cache_dir)
            _save(path, verdict, about)
        _VERDICTS[key] = verdict
        lm.auto_dtype = False  # settled: later engines take lm as it is
        if verdict.dtype == "bfloat16":
            lm.model = half if half is not None else lm.model.to(torch.bfloat16)
            lm.dtype = "bfloat16"
        lm.dtype_verdict = verdict.describe()
    return verdict


def _load(path: Path | None) -> Verdict | None:
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("version") != VERSION or data["dtype"] not in ("float32", "bfloat16"):
            return None
        return Verdict(
            dtype=str(data["dtype"]),
            step_ms={str(k): float(v) for k, v in data["step_ms"].items()},
            expected={str(k): float(v) for k, v in data["expected"].items()},
            note=str(data.get("note", "")),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # missing or unreadable: measure again


def _save(path: Path | None, verdict: Verdict, about: dict[str, str]) -> None:
    if path is None:
        return
    payload = {"version": VERSION, **dataclasses.asdict(verdict), "about": about}
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=1))
    except OSError as exc:  # a read-only cache only costs a re-measure next time
        log.warning("could not save the dtype choice to %s: %s", path, exc)


def _bf16_copy(model: Any) -> Any:
    """A bfloat16 copy of model built parameter by parameter, so the float32 weights are never
    held twice (tied weights stay tied)."""
    memo: dict[int, Any] = {
        id(p): torch.nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False)
        for p in model.parameters()
    }
    half = copy.deepcopy(model, memo)
    return half.to(torch.bfloat16).eval()


def _room_for(lm: Any) -> bool:
    from samchat.models.device import available_memory

    room = available_memory()
    need = sum(p.numel() for p in lm.model.parameters()) * 2
    return room is None or room > 2 * need


def _measure(lm: Any, cache_dir: Path | None) -> tuple[Verdict, Any]:
    """Both dtypes' fitted engines (kernels, cost curve, bfloat16's exactness check), then their
    one-row steps timed in turns; the expected speed prices each curve at REFERENCE_RATE."""
    from samchat.engines.torch_engine import TorchEngine

    if not _room_for(lm):
        note = "no memory for a bfloat16 copy to measure"
        return Verdict("float32", {}, {}, note), None
    log.info("measuring float32 against bfloat16 on this machine (once per model)…")
    half_model = _bf16_copy(lm.model)
    half_lm = dataclasses.replace(lm, model=half_model, dtype="bfloat16", auto_dtype=False)
    engines = {"float32": TorchEngine(lm, cache_dir), "bfloat16": TorchEngine(half_lm, cache_dir)}
    for engine in engines.values():
        engine.fit()
    step = _one_row_seconds(list(engines.values()), int(lm.vocab_size))
    step_ms, expected = {}, {}
    for (name, engine), seconds in zip(engines.items(), step, strict=True):
        curve = engine.cost_curve()
        usable = name == "float32" or engine.inexact_reason is None
        value = best_sequence_length(REFERENCE_RATE, REFERENCE_CAP, curve)[1] / seconds
        step_ms[name] = round(seconds * 1000, 2)
        expected[name] = round(value, 1) if usable else 0.0
    note = "" if expected["bfloat16"] else "bfloat16 drafts did not verify exactly here"
    pick = "bfloat16" if expected["bfloat16"] > MARGIN * expected["float32"] else "float32"
    return Verdict(pick, step_ms, expected, note), half_model if pick == "bfloat16" else None


def _one_row_seconds(
    engines: list[Any], vocab: int, context: int = 256, rounds: int = 12
) -> list[float]:
    """Median time of one-row forwards after `context` cached tokens, the engines taking turns
    so that load from elsewhere hits all alike."""
    gen = random.Random(0)
    ctx = [gen.randrange(vocab) for _ in range(context)]
    for engine in engines:
        engine.reset()
        engine.prefill(ctx)
    samples: list[list[float]] = [[] for _ in engines]
    for rnd in range(rounds + 1):  # round 0 warms up
        for i, engine in enumerate(engines):
            t0 = time.perf_counter()
            engine.forward([ctx[rnd]])
            dt = time.perf_counter() - t0
            engine.crop(context)
            if rnd:
                samples[i].append(dt)
    for engine in engines:
        engine.reset()
    return [statistics.median(s) for s in samples]


def cached_verdicts(dtype_dir: Path) -> list[tuple[dict[str, str], Verdict]]:
    """The choices measured on this machine so far (what each was for, the verdict):
    `samchat doctor` shows them."""
    found = []
    for path in sorted(dtype_dir.glob("*.json")):
        verdict = _load(path)
        if verdict is None:
            continue
        try:
            about = {str(k): str(v) for k, v in json.loads(path.read_text())["about"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            about = {}
        found.append((about, verdict))
    return found
