"""`samchat doctor`: versions, device, CPU, engine, model location, and which SAM core is in use."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import sqlite3
from pathlib import Path

from samchat import __version__
from samchat.errors import SamchatError


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def report(data_dir: Path | None = None) -> list[tuple[str, str]]:
    """What doctor prints, as (label, value) rows; no model weights are loaded. data_dir: the
    resolved one (--data-dir), else the default."""
    import torch

    from samchat import paths
    from samchat.engines.cpu import cpu_flags, cpu_name
    from samchat.engines.torch.placement import resolve_device
    from samchat.models.default import converted_dir, default_gguf_source

    rows: list[tuple[str, str]] = [
        ("samchat", __version__),
        ("python", platform.python_version()),
        ("platform", platform.platform()),
    ]
    for dist in ("torch", "transformers", "textual", "sqlite-utils", "bitsandbytes"):
        rows.append((dist, _version(dist)))
    rows.append(("sqlite", sqlite3.sqlite_version))
    rows.append(("device (auto)", str(resolve_device("auto"))))
    rows.append(("cuda", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no"))
    rows.append(("cpu threads", str(torch.get_num_threads())))
    rows.append(("cpu", cpu_name()))
    rows.append(("cpu flags", " ".join(cpu_flags()) or "none reported"))
    rows.extend(_llamacpp_rows())
    rows.extend(_pinned_rows(paths.cache_dir()))
    try:
        gguf, source = default_gguf_source()
        rows.append(("default model (gguf)", f"{gguf} (from {source})"))
    except SamchatError as exc:
        rows.append(("default model (gguf)", f"missing: {exc}"))
    converted = converted_dir()
    state = "ready" if (converted / "model.safetensors").exists() else "converted on first use"
    rows.append(("default model (converted)", f"{converted} ({state})"))
    rows.append(("SAM core", _sam_backend()))
    rows.extend(_kernel_rows(paths.cache_dir()))
    rows.extend(_packed_rows(paths.model_cache_dir()))
    rows.append(("data dir", str(data_dir or paths.data_dir())))
    rows.append(("cache dir", str(paths.cache_dir())))
    rows.append(("config dir", str(paths.config_dir())))
    return rows


def _llamacpp_rows() -> list[tuple[str, str]]:
    """The engine `auto` picks for the default model, and the llama.cpp build: its version and
    the CPU features it was compiled for (to compare with `cpu flags`)."""
    from samchat.engines.llamacpp import model as llamacpp_model
    from samchat.engines.registry import engine_kind
    from samchat.models.loader import ModelSpec, choose_engine

    try:
        engine = choose_engine(ModelSpec())
        # The format it runs the default model in: the file's own, or torch's CPU default.
        fmt = ", the GGUF's own types" if engine_kind(engine).native_gguf else ", float32"
    except SamchatError as exc:
        engine, fmt = f"unknown ({exc})", ""
    rows = [("engine (auto)", f"{engine} (for the default model{fmt})"), _chosen_row()]
    reason = llamacpp_model.unavailable_reason()
    if reason:
        return [*rows, ("llama.cpp", f"unavailable: {reason}")]
    rows.append(("llama.cpp", f"llama-cpp-python {llamacpp_model.version()}"))
    try:
        built = _enabled_features(llamacpp_model.system_info())
    except Exception as exc:  # a build that does not load: doctor says so, it never fails
        built = f"unavailable ({type(exc).__name__}: {exc})"
    rows.append(("llama.cpp build", built))
    return rows


def _chosen_row() -> tuple[str, str]:
    """What the app and serve decode config.toml's model (the default one) on, and why: the
    engine and format measured fastest here, once measured."""
    from samchat import paths
    from samchat.chat.config import ConfigError, load_config
    from samchat.models.engine_choice import kept, left_to_auto, refusals, why
    from samchat.models.loader import ModelSpec, choose_engine

    try:
        spec = load_config().model_spec()
    except ConfigError:
        spec = ModelSpec()
    speeds = kept(paths.cache_dir(), spec)
    if not speeds or not left_to_auto(spec):
        try:
            engine = choose_engine(spec)
        except SamchatError as exc:
            engine = f"unknown ({exc})"
        return ("engine (app, serve)", f"{engine}, {why(spec, engine, paths.cache_dir())}")
    best = min(speeds, key=lambda s: s.ms_per_token)
    times = ", ".join(f"{s.label} {s.ms_per_token:.1f} ms" for s in speeds)
    no = "".join(f"; {r.engine} refused: {r.reason}" for r in refusals(paths.cache_dir(), spec))
    return ("engine (app, serve)", f"{best.label}, measured fastest here ({times} per token){no}")


def _pinned_rows(cache: Path) -> list[tuple[str, str]]:
    """A warning where config.toml pins an engine or format other than the one measured fastest
    here for its model, naming the lines to remove (a pin outranks the measured choice)."""
    from samchat.chat.config import ConfigError, config_path, load_config
    from samchat.engines.registry import resolve
    from samchat.models.engine_choice import kept

    try:
        cfg = load_config()
    except ConfigError as exc:
        return [("config", str(exc))]
    if cfg.engine == "auto" and cfg.dtype == "auto":
        return []
    speeds = kept(cache, cfg.model_spec())
    if not speeds:
        return []
    best = min(speeds, key=lambda s: s.ms_per_token)
    asked = resolve(cfg.engine, cfg.dtype)  # `engine = "torch"` with `dtype = "int4"`: flat
    pinned = next((s for s in speeds if (s.engine, s.dtype) == asked), None)
    label = asked[0] if asked[1] == "auto" else "/".join(asked)
    if pinned is best:
        return [("config pins", f"{label}, measured fastest here")]
    how = f"{pinned.ms_per_token:.1f} ms per token" if pinned else "not measured here"
    path = config_path()
    lines = []
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text.lstrip().startswith("["):
            break  # the top-level keys come before the first table
        if "=" in text and text.split("=")[0].strip() in ("engine", "dtype"):
            lines.append(f"line {number}: {text.strip()}")
    return [
        (
            "warning",
            f"{path} pins {label} ({how}), but {best.label} is measured fastest here "
            f"({best.ms_per_token:.1f} ms per token): remove {' and '.join(lines)}",
        )
    ]


def _kernel_rows(cache: Path) -> list[tuple[str, str]]:
    """The torch kernels measured fastest on this machine, per model and dtype (chosen at a
    model's first reply, cached with its cost curve)."""
    from samchat.engines.costs.cache import cached_kernel_plans

    plans = cached_kernel_plans(cache / "costs")
    if not plans:
        return [("torch kernels", "not measured yet (chosen by timing at a model's first reply)")]
    return [
        (
            f"torch kernels ({about.get('model') or '?'}, {about.get('dtype') or '?'})",
            plan.describe(),
        )
        for about, plan in plans
    ]


def _packed_rows(models: Path) -> list[tuple[str, str]]:
    """The flat engine: the instruction set its weight-only formats pack for, its native
    forward, and the packed weights kept (packed at a model's first load on it)."""
    import torch

    kept = sorted(p.name for p in (models / "packed").glob("*.flat"))
    cap = torch.backends.cpu.get_cpu_capability()
    from samchat.engines.flat.native import build

    rows = [("flat engine", f"int4/int8 weight-only kernels for {cap} (--engine flat)")]
    native = build.library_path(models)
    built = f"compiled ({native.name})" if native.is_file() else "not compiled yet (at first load)"
    rows.append(("flat engine forward", f"native, {built}"))
    rows.append(("packed weights", ", ".join(kept) if kept else "none yet (packed at first load)"))
    return rows


def _enabled_features(info: str) -> str:
    """'CPU : SSE3 = 1 | AVX = 1 | AVX512 = 0 | ...' -> 'SSE3 AVX ...' (the ones that are on)."""
    names = []
    for part in info.split("|"):
        key, _, value = part.rpartition(":")[2].partition("=")
        if value.strip() == "1":
            names.append(key.strip())
    return " ".join(names) or info


def _sam_backend() -> str:
    """ "compiled", or "pure" with the reason when the compiled core is missing, stale or broken."""
    try:
        from samchat import sam

        problem = sam.compiled_problem(short=True)
        return f"{sam.backend()} ({problem})" if problem else sam.backend()
    except Exception as exc:  # doctor reports problems, it never fails on them
        return f"unavailable ({type(exc).__name__}: {exc})"


def run(args: argparse.Namespace) -> int:
    from samchat.cli_options import apply_data_dir

    rows = report(apply_data_dir(args))
    if getattr(args, "json", False):
        print(json.dumps(dict(rows), indent=1))
        return 0
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "doctor", help="show versions, device, CPU, engine, model and SAM core in use"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object, label: value")
    parser.set_defaults(func=run)
