"""Choosing the engine by measured speed: `samchat bench engines` times llama.cpp and the flat
engine on the real default GGUF and keeps the result (a record kept before the flat engine had
its own name is still read); the app, serve and doctor
follow a kept record (fixed ones here, one where each engine wins) where the engine and dtype
are left to auto; choices made by the user stand."""

from __future__ import annotations

import argparse
import dataclasses
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
    keep,
    kept,
    measure,
    preferred,
    record_path,
)
from samchat.models.loader import ModelSpec
from tests.serve.serve_process import Server

pytestmark = pytest.mark.model

# Fixed records, the winner first in one and last in the other: (speeds, the engine and dtype
# the app and serve must take, doctor's label for it).
LLAMACPP_FASTER = [
    EngineSpeed("llamacpp", "auto", 6.5, "llama.cpp (a fixed record)"),
    EngineSpeed("flat", "int4", 9.5, "flat int4 (a fixed record)"),
]
INT4_FASTER = [
    EngineSpeed("llamacpp", "auto", 9.5, "llama.cpp (a fixed record)"),
    EngineSpeed("flat", "int4", 6.5, "flat int4 (a fixed record)"),
]
RECORDS = pytest.mark.parametrize(
    ("speeds", "winner"),
    [(LLAMACPP_FASTER, ("llamacpp", "auto")), (INT4_FASTER, ("flat", "int4"))],
    ids=["llamacpp-faster", "int4-faster"],
)


def _kept_record(cache: Path, speeds: list[EngineSpeed]) -> Path:
    """cache, holding speeds as `samchat bench engines` keeps them for the default GGUF."""
    path = gguf_file(ModelSpec())
    assert path is not None
    keep(cache, path, speeds)
    assert kept(cache, ModelSpec()) == speeds
    return cache


def test_both_engines_are_timed_and_kept_and_the_apps_first_reply_drafts(tmp_path: Path) -> None:
    """bench engines (make setup) keeps each engine's speed and cost curve: the app's very
    first reply, on the engine it takes, drafts, and no timing of the machine follows it.
    What runs beside each engine's steps (bench engines' bandwidth read) runs once for each,
    before the next engine is loaded."""
    beside: list[tuple[str, int]] = []
    speeds = measure(
        ModelSpec(),
        tmp_path,
        lambda _: None,
        lambda speed: beside.append((speed.label, len(list((tmp_path / "costs").glob("*.json"))))),
    )
    assert [s.label for s in speeds] == ["llamacpp", "flat/int4"]
    assert beside == [("llamacpp", 0), ("flat/int4", 1)]  # each before its own cost curve
    assert all(s.ms_per_token > 0 for s in speeds)
    assert "int4" in speeds[1].describe
    assert kept(tmp_path, ModelSpec()) == speeds
    curves = sorted((tmp_path / "costs").glob("*.json"))
    assert len(curves) == len(speeds)  # a curve each
    for kept_curve in curves:  # measured under heavy load, a curve is refused and timed again:
        _plausible(kept_curve)  # the app's part is checked on curves it takes on any machine
    best = min(speeds, key=lambda s: s.ms_per_token)
    _first_reply_drafts(tmp_path, tmp_path / "app", best)


def _plausible(kept: Path) -> None:
    """The kept curve (and its long-context parts) made a fixed, ordinary one: 5% a row."""
    data = json.loads(kept.read_text())
    part = data
    while True:
        part["relative_cost"] = {k: 1.0 + 0.05 * (int(k) - 1) for k in part["relative_cost"]}
        if "long" not in part:
            break
        part = part["long"]
    kept.write_text(json.dumps(data))


@RECORDS
def test_the_app_and_serve_take_the_faster_kept(
    tmp_path: Path, speeds: list[EngineSpeed], winner: tuple[str, str]
) -> None:
    chosen = preferred(ModelSpec(), _kept_record(tmp_path, speeds))
    assert chosen == replace(ModelSpec(), engine=winner[0], dtype=winner[1], auto_engine=True)


@RECORDS
def test_the_app_reads_the_kept_choice(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    speeds: list[EngineSpeed],
    winner: tuple[str, str],
) -> None:
    from samchat.tui.launch import app_from_args

    cache = _kept_record(tmp_path / "cache", speeds)
    monkeypatch.setenv("SAMCHAT_CACHE_DIR", str(cache))
    app = app_from_args(argparse.Namespace(data_dir=str(tmp_path / "data")))
    # The app keeps the spec as named (config.toml's: auto) and resolves it at each load.
    assert (app.spec.engine, app.spec.dtype) == ("auto", "auto") and app.cache_dir == cache
    chosen = preferred(app.spec, cache)
    assert (chosen.engine, chosen.dtype) == winner


@RECORDS
def test_serve_loads_the_engine_the_record_names(
    tmp_path: Path, speeds: list[EngineSpeed], winner: tuple[str, str]
) -> None:
    """A real `samchat serve` with the engine left to auto: what it loads, in its own words."""
    _kept_record(tmp_path / "cache", speeds)  # the server's cache (serve_process.home_env)
    server = Server(tmp_path)
    try:
        log = server.stderr()
    finally:
        assert server.stop() == 0, server.stderr()
    on_llamacpp = "with llama.cpp" in log
    on_int4 = "flat engine (int4 on cpu)" in log
    assert (on_llamacpp, on_int4) == (winner[0] == "llamacpp", winner[1] == "int4"), log


@RECORDS
def test_doctor_names_the_engine_the_record_names(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    speeds: list[EngineSpeed],
    winner: tuple[str, str],
) -> None:
    from samchat.commands.doctor import report

    monkeypatch.setenv("SAMCHAT_CACHE_DIR", str(_kept_record(tmp_path / "cache", speeds)))
    row = dict(report(tmp_path / "data"))["engine (app, serve)"]
    label = winner[0] if winner[1] == "auto" else "/".join(winner)
    assert row.startswith(f"{label}, measured fastest here ("), row
    assert "llamacpp " in row and "flat/int4 " in row and " 6.5 ms" in row and " 9.5 ms" in row


def test_a_record_kept_before_the_flat_engine_had_its_name_still_counts(tmp_path: Path) -> None:
    """A record `samchat bench engines` kept when the flat engine was the torch engine's int4
    format: its file named by the key of then (the flat engine's build under torch's name),
    its speeds saying torch/int4. The app still takes the engine measured fastest, named
    flat/int4 now, and the record is kept again under that name."""
    import hashlib

    from samchat.engines.cpu import cpu_name
    from samchat.engines.flat.native import expected_forward
    from samchat.paths import model_cache_dir

    path = gguf_file(ModelSpec())
    assert path is not None
    stat = path.stat()
    builds = f"torch={expected_forward(model_cache_dir())},llamacpp="
    text = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{cpu_name()}|{builds}"
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    old = tmp_path / "engine-speed" / f"{path.stem}-{key}.json"
    old.parent.mkdir(parents=True)
    speeds = [
        {"engine": "llamacpp", "dtype": "auto", "ms_per_token": 9.5, "describe": "llama.cpp"},
        {"engine": "torch", "dtype": "int4", "ms_per_token": 6.5, "describe": "torch int4"},
    ]
    old.write_text(json.dumps({"speeds": speeds}, indent=1) + "\n", encoding="utf-8")
    assert not record_path(tmp_path, path).exists()
    assert [s.label for s in kept(tmp_path, ModelSpec()) or []] == ["llamacpp", "flat/int4"]
    chosen = preferred(ModelSpec(), tmp_path)
    assert (chosen.engine, chosen.dtype, chosen.auto_engine) == ("flat", "int4", True)
    again = json.loads(record_path(tmp_path, path).read_text(encoding="utf-8"))
    assert [(s["engine"], s["dtype"]) for s in again["speeds"]] == [
        ("llamacpp", "auto"),
        ("flat", "int4"),
    ]


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
def test_choices_made_by_the_user_stand(tmp_path: Path, spec: ModelSpec) -> None:
    for n, speeds in enumerate((LLAMACPP_FASTER, INT4_FASTER)):
        assert preferred(spec, _kept_record(tmp_path / str(n), speeds)) == spec


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


def test_another_gguf_file_is_measured_apart(tmp_path: Path) -> None:
    """A record names one file: a copy elsewhere has none yet."""
    cache = _kept_record(tmp_path / "cache", INT4_FASTER)
    path = gguf_file(ModelSpec())
    assert path is not None
    copy = tmp_path / "copy.gguf"
    copy.symlink_to(path)
    spec = replace(ModelSpec(), source=str(copy))
    assert kept(cache, spec) is None
    assert preferred(spec, cache) == spec


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


def _first_reply_drafts(cache: Path, tmp_path: Path, best: EngineSpeed) -> None:
    """The app, with cache as bench engines left it, answers once: on best's engine, drafting,
    with no timing of the machine before or after."""
    import asyncio

    from samchat.chat.config import Config
    from samchat.store import Store
    from samchat.tui.app import SamchatApp

    cfg = Config()
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=24)
    app = SamchatApp(
        db_path=tmp_path / "samchat.db",
        config=cfg,
        config_path=tmp_path / "config.toml",
        cache_dir=cache,
    )
    timed: list[bool] = []

    async def ask() -> None:
        async with app.run_test(size=(120, 36)) as pilot:
            while app.model_state != "ready":
                await pilot.pause(0.05)
            assert app.lm is not None and app.lm.engine == best.engine
            app.chat.prompt.insert("Repeat after me: the quick brown fox jumps over the lazy dog.")
            await pilot.press("enter")
            while app.chat.replies_finished == 0:
                timed.append(app.chat.conversation.replies.timing)
                await pilot.pause(0.05)
            await pilot.pause(0.3)
            timed.append(app.chat.conversation.replies.timing)

    asyncio.run(asyncio.wait_for(ask(), 300))
    assert not any(timed)
    with Store.open(tmp_path / "samchat.db") as store:
        (chat,) = store.chats()
        reply = next(m for m in store.messages(chat.id) if m.role == "assistant")
    assert reply.stats is not None and reply.stats.reply.steps < reply.stats.reply.tokens


def test_speeds_are_kept_per_forward(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A speed measured on the flat engine's native forward is not taken where its Python
    forward would run (no compiled core kept, or SAMCHAT_NATIVE_FORWARD=0), nor the reverse."""
    from samchat.models.default import bundled_gguf

    gguf = bundled_gguf()
    models = tmp_path / "models"
    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(models))
    monkeypatch.delenv("SAMCHAT_NATIVE_FORWARD", raising=False)
    python = record_path(tmp_path, gguf)
    core = models / "native" / "flat-0123456789abcdef.so"
    core.parent.mkdir(parents=True)
    core.write_bytes(b"")
    native = record_path(tmp_path, gguf)
    assert native != python
    native.parent.mkdir(parents=True, exist_ok=True)
    speeds = [{"engine": "flat", "dtype": "int4", "ms_per_token": 1.0, "describe": "native"}]
    native.write_text(json.dumps({"speeds": speeds}))
    assert kept(tmp_path, ModelSpec()) is not None
    chosen = preferred(ModelSpec(), tmp_path)
    assert (chosen.engine, chosen.dtype, chosen.auto_engine) == ("flat", "int4", True)
    monkeypatch.setenv("SAMCHAT_NATIVE_FORWARD", "0")
    assert record_path(tmp_path, gguf) == python
    assert kept(tmp_path, ModelSpec()) is None
