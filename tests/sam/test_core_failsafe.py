"""A compiled SAM core that is broken or stale is never used: samchat.sam falls back to the pure
core with one warning line. Each case runs in a subprocess on a temporary copy of the package, so
the real install is untouched."""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import samchat

REAL_PKG = Path(samchat.__file__).parent
REAL_SAM = REAL_PKG / "sam"
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]  # what the import system tries first
SHIM = f"automaton{SUFFIX}"
NATIVE = f"automaton__mypyc{SUFFIX}"  # mypyc puts the compiled code here; SHIM loads it
BUILT = (REAL_SAM / SHIM).exists() and (REAL_SAM / NATIVE).exists()
NOT_BUILT = "the mypyc extension is not built here (run `make setup`)"

REPORT = (
    "import samchat, samchat.sam as s\n"
    "from samchat.sam import automaton\n"
    "from samchat.commands.doctor import _sam_backend\n"
    "assert samchat.__file__.startswith(TMP), samchat.__file__\n"
    "sam = s.SuffixAutomaton()\n"
    "sam.extend_many([1, 2, 3, 1, 2])\n"  # whichever core was picked really works
    "print(s.backend())\n"
    "print(s.compiled_problem())\n"
    "print(_sam_backend())\n"
    "print(automaton is s.impl)\n"
)


def _record(sam_dir: Path) -> None:
    """What setup.py writes after a successful build (`sha256sum -c` format)."""
    names = ["automaton.py", *(p.name for p in sorted(sam_dir.glob(f"automaton*{SUFFIX}")))]
    lines = [f"{hashlib.sha256((sam_dir / n).read_bytes()).hexdigest()}  {n}\n" for n in names]
    (sam_dir / "_core_build.sha256").write_text("".join(lines))


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    """A copy of the samchat package whose build record matches its files."""
    shutil.copytree(REAL_PKG, tmp_path / "samchat", ignore=shutil.ignore_patterns("__pycache__"))
    sam_dir = tmp_path / "samchat" / "sam"
    if not (sam_dir / SHIM).exists():  # no real build: a garbage one still tests the checks
        (sam_dir / SHIM).write_bytes(b"not an ELF file")
    _record(sam_dir)
    return tmp_path


def _run(root: Path, code: str = REPORT) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SAMCHAT_PURE_SAM"}
    env["PYTHONPATH"] = str(root)
    # cwd: `python -c` puts it first on sys.path, and the real checkout must not be found.
    return subprocess.run(
        [sys.executable, "-c", f"TMP = {str(root)!r}\n{code}"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _assert_fell_back(proc: subprocess.CompletedProcess[str], cause: str) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warnings = proc.stderr.splitlines()
    assert len(warnings) == 1, proc.stderr
    assert warnings[0].startswith("samchat: warning: the compiled SAM core ")
    assert cause in warnings[0]
    assert "using the pure-Python core" in warnings[0]
    assert "run `make setup`" in warnings[0]
    out = proc.stdout.splitlines()
    assert out[0] == "pure"
    assert out[1] == warnings[0].removeprefix("samchat: warning: ")
    assert out[3] == "True"  # `from samchat.sam import automaton` gives the pure core too
    return out


def test_garbage_extension_falls_back_to_pure(pkg: Path) -> None:
    sam_dir = pkg / "samchat" / "sam"
    (sam_dir / SHIM).write_bytes(b"\x7fELF garbage, not a shared object")
    _record(sam_dir)  # as if the build had written it: the import itself fails
    out = _assert_fell_back(_run(pkg), "failed to import (ImportError: ")
    assert out[2].startswith("pure (compiled core failed to import (ImportError: ")
    assert out[2].endswith("; run `make setup`)")


@pytest.mark.skipif(not BUILT, reason=NOT_BUILT)
def test_extension_missing_its_init_symbol_falls_back_to_pure(pkg: Path) -> None:
    # A real shared library that does not export PyInit_automaton, as after ABI drift.
    sam_dir = pkg / "samchat" / "sam"
    shutil.copyfile(sam_dir / NATIVE, sam_dir / SHIM)
    _record(sam_dir)
    _assert_fell_back(_run(pkg), "failed to import (ImportError: ")


@pytest.mark.skipif(not BUILT, reason=NOT_BUILT)
def test_truncated_extension_is_not_loaded(pkg: Path) -> None:
    # Loading this one would kill the process (SIGBUS), so the build record must catch it.
    native = pkg / "samchat" / "sam" / NATIVE
    native.write_bytes(native.read_bytes()[:4096])
    out = _assert_fell_back(_run(pkg), f"is damaged: {NATIVE} differs from the build")
    assert (
        out[2]
        == f"pure (compiled core is damaged: {NATIVE} differs from the build; run `make setup`)"
    )


def test_stale_extension_is_not_loaded(pkg: Path) -> None:
    with (pkg / "samchat" / "sam" / "automaton.py").open("a") as f:
        f.write("# edited after the build\n")
    out = _assert_fell_back(_run(pkg), "is stale: automaton.py changed since it was built")
    assert out[2] == (
        "pure (compiled core is stale: automaton.py changed since it was built; run `make setup`)"
    )


def test_extension_without_build_record_is_not_loaded(pkg: Path) -> None:
    (pkg / "samchat" / "sam" / "_core_build.sha256").unlink()
    _assert_fell_back(_run(pkg), "has no build record")


def test_missing_extension_is_pure_without_warning(pkg: Path) -> None:
    for path in (pkg / "samchat" / "sam").glob("automaton*.so"):
        path.unlink()
    for path in (pkg / "samchat" / "sam").glob("automaton*.pyd"):
        path.unlink()
    proc = _run(pkg)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # building without a C compiler is supported: doctor says it
    out = proc.stdout.splitlines()
    assert out[0] == "pure"
    assert out[2] == "pure (compiled core is not built; run `make setup`)"


@pytest.mark.skipif(not BUILT, reason=NOT_BUILT)
def test_fresh_copy_uses_the_compiled_core(pkg: Path) -> None:
    # The same harness as above picks the compiled core when nothing is wrong with it.
    proc = _run(pkg)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.splitlines() == ["compiled", "None", "compiled", "True"]


@pytest.mark.skipif(not BUILT, reason=NOT_BUILT)
def test_this_checkout_uses_the_compiled_core() -> None:
    code = "import samchat.sam as s; print(s.backend()); print(s.compiled_problem())"
    env = {k: v for k, v in os.environ.items() if k != "SAMCHAT_PURE_SAM"}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["compiled", "None"], "run `make setup` to rebuild it"
    assert proc.stderr == ""
