"""Building the native lean forward: keyed by what it was compiled from, and a compiler that
fails is one line saying which compiler and what it said (the engine then runs the Python
forward)."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.engines.torch.native import build


def test_a_failing_compiler_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(RuntimeError) as caught:
        build.build(tmp_path)
    message = str(caught.value)
    assert message.startswith("false failed") and "\n" not in message
    assert not list((tmp_path / "native").iterdir())  # no half-written library left


def test_a_missing_compiler_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(RuntimeError, match="could not run"):
        build.build(tmp_path)


def test_the_build_is_keyed_by_its_compiler(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = build.library_path(tmp_path)
    monkeypatch.setenv("CXX", "g++")
    assert build.library_path(tmp_path) != first
    assert first.parent == tmp_path / "native"


def test_the_command_line_tool_warns_instead_of_failing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """make setup carries on without it: samchat then uses the Python forward."""
    monkeypatch.setenv("CXX", "false")
    assert build.main([str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: the native int4 forward was not built") and err.count("\n") == 1
    assert build.main([]) == 2
