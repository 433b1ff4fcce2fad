"""The command line as a user runs it: a real subprocess, exit codes, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from samchat import __version__


def samchat(
    *args: str, stdin: str | None = None, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    if home is not None:
        env["SAMCHAT_DATA_DIR"] = str(home / "data")
    return subprocess.run(
        [sys.executable, "-m", "samchat.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def assert_clean_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    assert result.returncode == 2, result.stderr
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


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("ask", "--model", "/no/such/model", "hi"), "does not exist"),
        (("ask", "--model", "nobody/no-model", "hi"), "HF_HUB_OFFLINE"),
        (("ask", "--quantize", "8bit", "--device", "cpu", "hi"), "needs a CUDA GPU"),
        (("ask", "   "), "prompt is empty"),
    ],
)
def test_bad_input_gets_one_clear_line(args: tuple[str, ...], fragment: str) -> None:
    assert_clean_error(samchat(*args), fragment)


def test_invalid_option_values_are_rejected_by_the_parser() -> None:
    result = samchat("ask", "--temperature", "-1", "hi")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "--temperature" in result.stderr


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
