"""config.toml holds what the user set: a save writes only what changed, an engine and its
format go together, and doctor names a pin slower than the engine measured fastest."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from samchat.chat.config import Config, ConfigError, changes, load_config, save_config
from samchat.cli_options import spec_from_args


def test_no_change_writes_nothing_and_a_change_writes_only_its_key(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    cfg = Config()
    assert not changes(cfg, Config())
    save_config(cfg, Config(), path)
    assert not path.exists()
    cfg.theme = "ember"
    cfg.sampling = dataclasses.replace(cfg.sampling, temperature=0.3)
    save_config(cfg, Config(), path)
    assert tomllib.loads(path.read_text(encoding="utf-8")) == {
        "theme": "ember",
        "sampling": {"temperature": 0.3},
    }
    assert load_config(path) == cfg


def test_a_resolved_engine_is_never_a_change_and_a_picked_one_is(tmp_path: Path) -> None:
    text = '# mine\nengine = "torch"  # slow but mine\n'
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    read = load_config(path)
    cfg = load_config(path)
    save_config(cfg, read, path)
    assert path.read_text(encoding="utf-8") == text
    cfg.dtype = "int4"
    save_config(cfg, read, path)
    saved = path.read_text(encoding="utf-8")
    assert saved.startswith(text) and tomllib.loads(saved)["dtype"] == "int4"


def test_a_bad_dtype_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('dtype = "int3"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^config: dtype must be one of auto, .*'int3'$"):
        load_config(path)


@pytest.mark.parametrize(
    ("flags", "engine", "dtype"),
    [
        ({}, "torch", "int4"),  # the file's pair
        ({"dtype": "int8"}, "torch", "int8"),  # a format for the file's engine
        ({"engine": "torch"}, "torch", "auto"),  # --engine alone: as on the command line
        ({"engine": "llamacpp"}, "llamacpp", "auto"),
        ({"engine": "flat"}, "flat", "auto"),
    ],
)
def test_an_engine_and_its_format_go_together(
    flags: dict[str, str], engine: str, dtype: str
) -> None:
    cfg = Config(engine="torch", dtype="int4")
    spec = spec_from_args(argparse.Namespace(**flags), cfg)
    assert (spec.engine, spec.dtype) == (engine, dtype)


@pytest.mark.model
def test_doctor_names_a_pinned_engine_slower_than_the_one_measured_fastest(tmp_path: Path) -> None:
    from samchat.models.default import bundled_gguf
    from samchat.models.engine_choice import EngineSpeed, keep

    cache, config = tmp_path / "cache", tmp_path / "config"
    keep(
        cache,
        bundled_gguf(),
        [EngineSpeed("llamacpp", "auto", 9.0, ""), EngineSpeed("flat", "int4", 5.0, "")],
    )
    config.mkdir()
    env = {
        **os.environ,
        "SAMCHAT_CACHE_DIR": str(cache),
        "SAMCHAT_CONFIG_DIR": str(config),
        "SAMCHAT_DATA_DIR": str(tmp_path / "data"),
    }

    def doctor() -> dict[str, str]:
        done = subprocess.run(
            [sys.executable, "-m", "samchat", "doctor", "--json"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        report: dict[str, str] = json.loads(done.stdout)
        return report

    assert "warning" not in doctor()  # nothing pinned
    (config / "config.toml").write_text('theme = "ember"\nengine = "torch"\n', encoding="utf-8")
    warning = doctor()["warning"]
    assert "pins torch (not measured here)" in warning and "flat/int4" in warning
    assert 'remove line 2: engine = "torch"' in warning
    (config / "config.toml").write_text('engine = "llamacpp"\n', encoding="utf-8")
    assert "llamacpp (9.0 ms per token)" in doctor()["warning"]
    # The flat engine, by its name or as it was spelt before it had one.
    for text in ('engine = "flat"\n', 'engine = "torch"\ndtype = "int4"\n'):
        (config / "config.toml").write_text(text, encoding="utf-8")
        report = doctor()
        assert "warning" not in report
        assert report["config pins"] == "flat/int4, measured fastest here"
