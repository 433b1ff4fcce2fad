"""Building the native lean forward: keyed by what it was compiled from, and a compiler that
fails is one line saying which compiler and what it said (the engine then runs the Python
forward)."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.engines.flat.native import build


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


def test_a_damaged_library_is_compiled_again(tmp_path: Path) -> None:
    """In a fresh process (this one has its library loaded): a kept library that does not
    load is replaced, with a notice, and the forward runs natively."""
    import os
    import subprocess
    import sys

    path = build.library_path(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a library")
    code = (
        "import sys; from pathlib import Path; from samchat.engines.flat.native import build;"
        "notes = []; why = build.load(Path(sys.argv[1]), notes.append);"
        "print(why); print(notes)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr
    why, notes = done.stdout.splitlines()
    assert why == "None"
    assert "is unusable" in notes and "compiling again" in notes
    assert path.stat().st_size > 1000


@pytest.mark.model
@pytest.mark.parametrize("arch", ["native", "haswell"], ids=["this-cpu", "avx2"])
def test_rows_are_exact_on_each_instruction_set(tmp_path: Path, arch: str) -> None:
    """The forward compiled for this CPU and for AVX2 alone (tiles.h's other paths), each in a
    process of its own with the packed weights shared: every row of a verification of 1-16
    inputs, and of a tree, equals the one-token step."""
    import os
    import subprocess
    import sys

    from samchat.paths import model_cache_dir

    cache = tmp_path / "models"
    cache.mkdir()
    (cache / "packed").symlink_to(model_cache_dir() / "packed", target_is_directory=True)
    env = {**os.environ, "SAMCHAT_MODEL_CACHE": str(cache), build.ARCH_ENV: arch}
    done = subprocess.run(
        [sys.executable, "-m", "tests.engines.flat.rows_child"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "native lean" in done.stdout and done.stdout.strip().endswith("exact")
    assert list((cache / "native").glob("lean-*.so"))
