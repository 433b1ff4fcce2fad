"""Which engine and weight format decode a GGUF model fastest on this machine: measured once
(`samchat bench engines`, which `make setup` runs for the bundled model; the app and `serve`
measure any other after its first answer: engine_trial.py), kept, and taken by the app and
`serve` where the engine and dtype are left to auto. A one-shot `ask` keeps llama.cpp, which
starts sooner than torch imports.

The measure is what the user waits for per token: one-token steps through the engine, after
a prompt, with the greedy choice of each step. Each engine's verification costs are measured
and kept at the same time, so that the first reply of a new install drafts."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from samchat.engines.registry import GGUF_CPU_CANDIDATES, resolve
from samchat.errors import EngineDeclinedError, SamchatError
from samchat.models.catalog import is_gguf
from samchat.models.loader import LoadedModel, ModelSpec

STEPS = 24  # one-token steps timed per candidate (after as many to warm up)
# Fewer steps, for tests of the measurement (its figures then mean little).
STEPS_ENV = "SAMCHAT_ENGINE_STEPS"
_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."

Say = Callable[[str], None]
Beside = Callable[["EngineSpeed"], None]


@dataclass(frozen=True)
class EngineSpeed:
    engine: str
    dtype: str
    ms_per_token: float
    describe: str

    @property
    def label(self) -> str:
        return label(self.engine, self.dtype)


@dataclass(frozen=True)
class Refusal:
    """A candidate that was not timed: it cannot run the file here, or would not fit."""

    engine: str
    dtype: str
    reason: str


def label(engine: str, dtype: str) -> str:
    return engine if dtype == "auto" else f"{engine}/{dtype}"


def steps() -> int:
    """One-token steps timed per candidate: STEPS, or STEPS_ENV's number."""
    try:
        return max(1, int(os.environ.get(STEPS_ENV, "")))
    except ValueError:
        return STEPS


def gguf_file(spec: ModelSpec) -> Path | None:
    """The GGUF file spec names (the bundled one for no source), else None."""
    if spec.source is None:
        from samchat.models.default import bundled_gguf

        try:
            return bundled_gguf()
        except SamchatError:
            return None
    path = Path(spec.source).expanduser()
    return path if path.is_file() and is_gguf(path) else None


def _builds(former: bool = False) -> str:
    """Which build of each engine runs here (the flat engine's native or Python forward): a
    speed measured on one is not taken for the other. former: as the builds were named when
    the flat engine was the torch engine's int4/int8 formats (its build then torch's), so
    that a record kept before it had its own name is still found."""
    from samchat.engines.registry import KINDS
    from samchat.paths import model_cache_dir

    cache = model_cache_dir()
    builds = {kind.name: kind.build_name(cache) for kind in KINDS}
    for kind in KINDS if former else ():
        if kind.formerly:
            builds[kind.formerly] = builds.pop(kind.name)
    return ",".join(f"{name}={build}" for name, build in builds.items())


def _key(path: Path, former: bool = False) -> str:
    from samchat.engines.cpu import cpu_name

    stat = path.stat()
    where = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{cpu_name()}"
    text = f"{where}|{_builds(former)}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def record_path(cache_dir: Path, path: Path, former: bool = False) -> Path:
    return cache_dir / "engine-speed" / f"{path.stem}-{_key(path, former)}.json"


def _read(record: Path) -> list[EngineSpeed]:
    """A record's speeds, each engine and format as named now (a torch/int4 of an older
    record is flat/int4: the same engine under its own name)."""
    raw = json.loads(record.read_text(encoding="utf-8"))
    speeds: list[EngineSpeed] = []
    for item in raw["speeds"]:
        speed = EngineSpeed(**item)
        engine, dtype = resolve(speed.engine, speed.dtype)
        speeds.append(replace(speed, engine=engine, dtype=dtype))
    return speeds


def refusals(cache_dir: Path, spec: ModelSpec) -> list[Refusal]:
    """The candidates the kept measurement of spec's file could not time, and why."""
    path = gguf_file(spec)
    if path is None:
        return []
    try:
        raw = json.loads(record_path(cache_dir, path).read_text(encoding="utf-8"))
        return [Refusal(**item) for item in raw.get("refused", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []


def kept(cache_dir: Path, spec: ModelSpec) -> list[EngineSpeed] | None:
    """The kept measurement for spec's GGUF file on this machine, if any (a damaged record
    counts as none); one kept before the flat engine had its own name is kept again under
    the name it has now."""
    path = gguf_file(spec)
    if path is None:
        return None
    try:
        return _read(record_path(cache_dir, path))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    try:
        speeds = _read(record_path(cache_dir, path, former=True))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    with contextlib.suppress(OSError):  # read from the old record again next time
        keep(cache_dir, path, speeds)
    return speeds


def left_to_auto(spec: ModelSpec) -> bool:
    """spec leaves the engine and format to samchat, on the CPU."""
    if spec.engine != "auto" or spec.dtype != "auto" or spec.quantize or spec.cuda_graphs:
        return False
    return spec.device in ("auto", "cpu")


def preferred(spec: ModelSpec, cache_dir: Path) -> ModelSpec:
    """spec on the engine and format measured fastest for it here, where it leaves them to
    auto on the CPU; spec itself otherwise (nothing kept, or a choice made on the command
    line or in config.toml)."""
    if not left_to_auto(spec):
        return spec
    speeds = kept(cache_dir, spec)
    if not speeds:
        return spec
    best = min(speeds, key=lambda s: s.ms_per_token)
    # Chosen here, not by the user: a model the engine cannot compute exactly (a newer file
    # at this path, say) goes to llama.cpp with a notice instead of failing.
    return replace(spec, engine=best.engine, dtype=best.dtype, auto_engine=True)


def time_steps(
    lm: LoadedModel,
    candidate: tuple[str, str],
    cache_dir: Path,
    count: int,
    cancelled: Callable[[], bool] | None = None,
) -> EngineSpeed:
    """The median of `count` one-token steps on an engine of lm's own (after as many to warm
    up), after a prompt; `cancelled()` true stops it between steps (MeasurementCancelled)."""
    import numpy as np

    from samchat.engines.costs import MeasurementCancelled

    engine = lm.kind.open(lm, cache_dir)
    ids = list(lm.tokenizer(_PROMPT, add_special_tokens=False)["input_ids"])
    logits = engine.prefill(ids, logits=1)
    assert logits is not None
    token = int(np.argmax(logits[-1]))
    times: list[float] = []
    for step in range(2 * count):
        if cancelled is not None and cancelled():
            raise MeasurementCancelled("the engines' measurement gave way")
        start = engine.length
        t0 = time.perf_counter()
        row = engine.forward([token])
        token = int(np.argmax(row[0]))
        engine.commit(start, [0])
        if step >= count:
            times.append(time.perf_counter() - t0)
    ms = 1000 * statistics.median(times)
    return EngineSpeed(candidate[0], candidate[1], ms, engine.meter.describe())


def _time_steps(
    spec: ModelSpec, cache_dir: Path, say: Say, beside: Beside | None = None
) -> EngineSpeed:
    """One-token steps on spec's engine (then `beside`, with the model still loaded), then its
    verification costs measured and kept in cache_dir (as a session keeps them), so a first
    reply on it drafts at once."""
    from samchat.models import load_model

    lm = load_model(spec, progress=say)
    speed = time_steps(lm, (spec.engine, spec.dtype), cache_dir, steps())
    if beside is not None:
        beside(speed)
    meter = lm.kind.open(lm, cache_dir).meter
    if meter.cached_cost_curve() is None:
        say(f"{speed.label}: timing drafts of 1-64 tokens (once)")
    try:
        meter.cost_curve()  # measured unless known; kept in cache_dir either way
    except SamchatError as exc:  # replies then time it after the first one, as before
        say(f"{speed.label}: timing drafts failed: {exc}")
    return speed


def measure(
    spec: ModelSpec, cache_dir: Path, say: Say, beside: Beside | None = None
) -> list[EngineSpeed]:
    """Times each candidate that can run spec's GGUF file here and keeps the result; `beside`
    runs right after each candidate's steps are timed (`bench engines` reads the machine's
    bandwidth there, in the same minute as the steps)."""
    from samchat.models.loader import choose_engine

    path = gguf_file(spec)
    if path is None:
        raise SamchatError(
            f"{spec.source} is not a GGUF file; the engines are compared on GGUF models"
        )
    speeds: list[EngineSpeed] = []
    refused: list[Refusal] = []
    for engine, dtype in GGUF_CPU_CANDIDATES:
        candidate = replace(spec, engine=engine, dtype=dtype)
        try:
            choose_engine(candidate)
            speeds.append(_time_steps(candidate, cache_dir, say, beside))
        except EngineDeclinedError as exc:  # a file the flat engine cannot compute exactly, or fit
            say(f"{label(engine, dtype)}: skipped ({exc})")
            refused.append(Refusal(engine, dtype, str(exc)))
        except SamchatError as exc:  # an engine not installed, say
            say(f"{label(engine, dtype)}: skipped ({exc})")
            refused.append(Refusal(engine, dtype, str(exc)))
    if not speeds:
        raise SamchatError("no engine can run this model here")
    keep(cache_dir, path, speeds, refused)
    return speeds


def keep(
    cache_dir: Path, path: Path, speeds: list[EngineSpeed], refused: list[Refusal] | None = None
) -> Path:
    """Keeps the measurement of the GGUF file at path (atomically: a reader never sees half)."""
    out = record_path(cache_dir, path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.tmp")
    record = {"speeds": [asdict(s) for s in speeds], "refused": [asdict(r) for r in refused or []]}
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(out)
    return out


def why(spec: ModelSpec, running: str, cache_dir: Path | None) -> str:
    """Why the model named by spec runs on the engine named `running`, in a few words (the
    status bar, doctor, serve's log and the benchmarks' JSON)."""
    if not left_to_auto(spec):
        return "asked for with --engine/--dtype or config.toml"
    if gguf_file(spec) is None:
        return "the engine for this model (not a GGUF file)"
    speeds = kept(cache_dir, spec) if cache_dir is not None else None
    if speeds is None:
        return "not measured yet: measuring after the first answer"
    refused = refusals(cache_dir, spec) if cache_dir is not None else []
    others = [r for r in refused if r.engine != running]
    no = "".join(f"; {label(r.engine, r.dtype)} refused: {r.reason}" for r in others)
    if not speeds:
        return f"no engine measured here{no}"
    best = min(speeds, key=lambda s: s.ms_per_token)
    rest = [s for s in speeds if s is not best]
    vs = " vs " + ", ".join(f"{s.label} {s.ms_per_token:.1f}" for s in rest) if rest else ""
    head = f"measured fastest here: {best.label} {best.ms_per_token:.1f} ms/token{vs}"
    if best.engine != running:  # the load declined it (a newer file, too little memory)
        head = f"{best.label} measured fastest here, but it did not load"
    return head + no
