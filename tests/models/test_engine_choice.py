"""Choosing the engine by measured speed: `samchat bench engines` times llama.cpp and the torch
engine's int4 format on the real default GGUF, keeps the result, and the app and serve take the
faster where the engine and dtype are left to auto; choices made by the user stand."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from samchat.errors import SamchatError
from samchat.models.engine_choice import (
    EngineSpeed,
    gguf_file,
    kept,
    measure,
    preferred,
    record_path,
)
from samchat.models.loader import ModelSpec

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[EngineSpeed]]:
    cache = tmp_path_factory.mktemp("cache")
    return cache, measure(ModelSpec(), cache, lambda _: None)


def test_both_engines_are_timed_and_kept(measured: tuple[Path, list[EngineSpeed]]) -> None:
    cache, speeds = measured
    assert [s.label for s in speeds] == ["llamacpp", "torch/int4"]
    assert all(s.ms_per_token > 0 for s in speeds)
    assert "int4" in speeds[1].describe
    assert kept(cache, ModelSpec()) == speeds


def test_the_app_and_serve_take_the_fastest(measured: tuple[Path, list[EngineSpeed]]) -> None:
    cache, speeds = measured
    best = min(speeds, key=lambda s: s.ms_per_token)
    chosen = preferred(ModelSpec(), cache)
    assert (chosen.engine, chosen.dtype) == (best.engine, best.dtype)


def test_the_app_reads_the_kept_choice(
    measured: tuple[Path, list[EngineSpeed]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from samchat.tui.launch import app_from_args

    cache, speeds = measured
    best = min(speeds, key=lambda s: s.ms_per_token)
    monkeypatch.setenv("SAMCHAT_CACHE_DIR", str(cache))
    app = app_from_args(argparse.Namespace(data_dir=str(cache / "data")))
    assert (app.spec.engine, app.spec.dtype) == (best.engine, best.dtype)


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec(engine="llamacpp"),
        ModelSpec(engine="torch"),
        ModelSpec(dtype="float32"),
        ModelSpec(device="cuda"),
    ],
    ids=["engine", "torch", "dtype", "device"],
)
def test_choices_made_by_the_user_stand(
    measured: tuple[Path, list[EngineSpeed]], spec: ModelSpec
) -> None:
    assert preferred(spec, measured[0]) == spec


def test_nothing_kept_or_a_damaged_record_changes_nothing(tmp_path: Path) -> None:
    assert preferred(ModelSpec(), tmp_path) == ModelSpec()
    path = gguf_file(ModelSpec())
    assert path is not None
    record = record_path(tmp_path, path)
    record.parent.mkdir(parents=True)
    for text in ("{not json", json.dumps({"speeds": [{"engine": "torch"}]}), "[]"):
        record.write_text(text)
        assert kept(tmp_path, ModelSpec()) is None
        assert preferred(ModelSpec(), tmp_path) == ModelSpec()


def test_another_gguf_file_is_measured_apart(
    measured: tuple[Path, list[EngineSpeed]], tmp_path: Path
) -> None:
    """A record names one file: a copy elsewhere has none yet."""
    path = gguf_file(ModelSpec())
    assert path is not None
    copy = tmp_path / "copy.gguf"
    copy.symlink_to(path)
    spec = replace(ModelSpec(), source=str(copy))
    assert kept(measured[0], spec) is None
    assert preferred(spec, measured[0]) == spec


def test_a_model_that_is_no_gguf_is_a_one_line_error(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    with pytest.raises(SamchatError, match="not a GGUF file"):
        measure(ModelSpec(source=str(text)), tmp_path, lambda _: None)
    done = subprocess.run(
        [sys.executable, "-m", "samchat", "bench", "engines", "--model", str(text)],
        capture_output=True,
        text=True,
        env={**os.environ, "SAMCHAT_CACHE_DIR": str(tmp_path)},
        timeout=120,
    )
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "not a GGUF file" in done.stderr
    assert "Traceback" not in done.stderr


def test_speeds_are_kept_per_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A speed measured on the flat engine's native forward is not taken where its Python
    forward would run (no compiled core kept, or SAMCHAT_NATIVE_FORWARD=0), nor the reverse."""
    from samchat.models.default import bundled_gguf

    gguf = bundled_gguf()
    models = tmp_path / "models"
    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(models))
    monkeypatch.delenv("SAMCHAT_NATIVE_FORWARD", raising=False)
    python = record_path(tmp_path, gguf)
    core = models / "native" / "lean-0123456789abcdef.so"
    core.parent.mkdir(parents=True)
    core.write_bytes(b"")
    native = record_path(tmp_path, gguf)
    assert native != python
    native.parent.mkdir(parents=True, exist_ok=True)
    speeds = [{"engine": "torch", "dtype": "int4", "ms_per_token": 1.0, "describe": "native"}]
    native.write_text(json.dumps({"speeds": speeds}))
    assert kept(tmp_path, ModelSpec()) is not None
    chosen = preferred(ModelSpec(), tmp_path)
    assert (chosen.engine, chosen.dtype, chosen.auto_engine) == ("torch", "int4", True)
    monkeypatch.setenv("SAMCHAT_NATIVE_FORWARD", "0")
    assert record_path(tmp_path, gguf) == python
    assert kept(tmp_path, ModelSpec()) is None
