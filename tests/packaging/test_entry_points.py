"""`python -m samchat` and the shell completions (`samchat completion bash|zsh|fish`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from samchat import __version__
from samchat.cli import command_names


def samchat_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "samchat", *args],
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_python_m_samchat_is_the_samchat_command() -> None:
    result = samchat_module("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"samchat {__version__}"


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_script_knows_every_sub_command(shell: str) -> None:
    result = samchat_module("completion", shell)
    assert result.returncode == 0, result.stderr
    script = result.stdout
    names = command_names()
    assert {"completion", "doctor", "ask", "bench"} <= names
    for name in sorted(names):
        assert name in script, f"{shell} completion lacks the sub-command {name!r}"
    assert "--model" in script and "--data-dir" in script
    if shell == "bash":
        assert "complete" in script and "_shtab_samchat" in script
    elif shell == "zsh":
        assert script.startswith("#compdef samchat")
    else:
        assert "complete -c samchat" in script


def test_bash_completion_script_parses() -> None:
    """`bash -n`: a syntax check, nothing runs (bash is on every machine that runs `make`; zsh
    and fish, rarely installed, get the content checks above only)."""
    bash = shutil.which("bash")
    assert bash is not None, "bash is not installed"
    script = samchat_module("completion", "bash").stdout
    proc = subprocess.run([bash, "-n"], input=script, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_completion_rejects_an_unknown_shell() -> None:
    result = samchat_module("completion", "tcsh")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
