"""The command line as a user runs it: a real subprocess, exit codes, one-line errors."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from samchat import __version__


def samchat(
    *args: str, stdin: str | None = None, home: Path | None = None, importtime: bool = False
) -> subprocess.CompletedProcess[str]:
    """importtime: Python lists each module it imports on stderr (see `imported`)."""
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    if home is not None:
        env["SAMCHAT_DATA_DIR"] = str(home / "data")
    return subprocess.run(
        [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "samchat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def assert_clean_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0]


def test_version() -> None:
    result = samchat("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"samchat {__version__}"


def test_doctor_reports_device_model_and_core() -> None:
    result = samchat("doctor")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for label in ("torch", "transformers", "device (auto)", "default model (gguf)", "SAM core"):
        assert label in out
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in out
    rows = {}
    for line in out.splitlines():
        label, _, value = line.partition("  ")
        rows[label] = value.strip()
    # llama-cpp-python is installed here (make setup builds it), on a CPU: auto takes it.
    assert rows["engine (auto)"] == "llamacpp (for the default model, the GGUF's own types)"
    # The flat engine's weight-only CPU formats, and the instruction set they pack for.
    assert "int4" in rows["flat engine"] and rows["packed weights"]
    assert rows["llama.cpp"] == f"llama-cpp-python {importlib.metadata.version('llama-cpp-python')}"
    flags = rows["cpu flags"].split()
    built = rows["llama.cpp build"].split()  # the features the build uses, e.g. AVX2 FMA
    assert rows["cpu"] and flags and built
    if "avx2" in flags:  # built for this CPU, not for a baseline one
        assert {"AVX", "AVX2", "FMA", "F16C"} <= set(built)
    if "avx512_vnni" in flags and "avx512f" in flags:
        assert {"AVX512", "AVX512_VNNI"} <= set(built)
    assert not any(name.startswith("AMX") for name in built)  # `make setup` leaves AMX out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("ask", "--model", "/no/such/model", "hi"), "does not exist"),
        (("ask", "--model", "nobody/no-model", "hi"), "HF_HUB_OFFLINE"),
        (("ask", "--quantize", "8bit", "--device", "cpu", "hi"), "needs a CUDA GPU"),
        (("ask", "--cuda-graphs", "--device", "cpu", "hi"), "--cuda-graphs needs a CUDA GPU"),
        (("ask", "--cuda-graphs", "--engine", "llamacpp", "hi"), "apply to --engine torch"),
        (("ask", "   "), "prompt is empty"),
    ],
)
def test_bad_input_gets_one_clear_line(args: tuple[str, ...], fragment: str) -> None:
    """Answered at once: none of these needs torch or transformers to be told (their import
    took seconds before a typo was reported)."""
    result = samchat(*args, importtime=True)
    assert_clean_error(result, fragment)
    assert not imported(result) & {"torch", "transformers"}


def imported(result: subprocess.CompletedProcess[str]) -> set[str]:
    """The modules a `samchat(..., importtime=True)` run imported."""
    prefix = "import time:"
    lines = [line for line in result.stderr.splitlines() if line.startswith(prefix)]
    assert lines, "no -X importtime lines"
    return {line.rsplit("|", 1)[-1].strip() for line in lines}


def test_invalid_option_values_are_rejected_by_the_parser() -> None:
    result = samchat("ask", "--temperature", "-1", "hi")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--temperature" in result.stderr


@pytest.mark.parametrize("where", [("ask",), ()])
def test_an_unknown_engine_is_rejected_by_the_parser(where: tuple[str, ...]) -> None:
    result = samchat(*where, "--engine", "bogus", "hi")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = [x for x in result.stderr.splitlines() if "error:" in x]
    assert "--engine" in line and "invalid choice: 'bogus'" in line


def test_llamacpp_on_a_model_directory_is_one_clear_line(tmp_path: Path) -> None:
    model = tmp_path / "hf-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    result = samchat("ask", "--engine", "llamacpp", "--model", str(model), "hi", home=tmp_path)
    assert_clean_error(result, "the llama.cpp engine runs .gguf files")
    assert str(model) in result.stderr


def test_a_bad_engine_in_config_toml_is_one_clear_line(tmp_path: Path) -> None:
    config = Path(os.environ["SAMCHAT_CONFIG_DIR"]) / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('engine = "gpu"\n')
    result = samchat("ask", "hi", home=tmp_path)
    assert_clean_error(result, "config: engine must be one of auto, torch, llamacpp")


def test_command_names_match_the_registered_sub_commands() -> None:
    """The app's fast start skips importing command modules: their names must still be known."""
    import argparse

    from samchat.cli import build_parser, command_names, wants_app

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == command_names()
    # Helper modules (commands/_support.py) are neither commands nor registered as one.
    assert "_support" not in sub.choices and not any(n.startswith("_") for n in command_names())
    assert wants_app([]) and wants_app(["--model", "some/dir", "--device", "cpu"])
    assert not wants_app(["search", "warranty"]) and not wants_app(["--help"])


# The app's start path (no command module imported) is checked in test_import_hygiene.py.


def test_a_missing_dependency_is_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken install (a package samchat needs is missing: the first start migrates a new
    database with sqlite-utils) names the package and the fix, and is not called a bug."""
    from samchat.cli import main

    monkeypatch.setitem(sys.modules, "sqlite_utils", None)
    assert main(["history", "--data-dir", str(tmp_path / "fresh")]) == 1
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: the Python package 'sqlite_utils' that samchat needs")
    assert "reinstall samchat" in line and "a bug" not in line
