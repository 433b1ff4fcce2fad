"""The flat engine's native forward (forward.cpp): compiled for this CPU and this torch once, kept
beside the packed weights, and loaded as torch ops (torch.ops.samchat_flat).

Without a C++ compiler the engine runs the Python forward (forward.py) instead (slower, and exact
too). `python -m samchat.engines.flat.native.build DIR` builds it ahead of time, as `make setup`
does."""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from samchat.engines.flat.native import SWITCH

SOURCE = Path(__file__).with_name("forward.cpp")
HEADERS = (Path(__file__).with_name("tiles.h"), Path(__file__).with_name("attention.h"))
# No contraction into fused multiply-adds: a vector loop and its remainder then compute alike.
FLAGS = ("-O3", "-ffp-contract=off", "-fopenmp", "-shared", "-fPIC")
# The instruction sets to compile for: this CPU's, unless SAMCHAT_NATIVE_ARCH names others
# (haswell: the AVX2 paths, which the tests check on an AVX-512 machine too).
ARCH_ENV = "SAMCHAT_NATIVE_ARCH"


def _arch() -> str:
    return f"-march={os.environ.get(ARCH_ENV) or 'native'}"


_lock = threading.Lock()
_loaded: Path | None = None


def _compiler() -> str:
    return os.environ.get("CXX", "c++")


def _cpu_flags() -> str:
    """This CPU's model and instruction sets (-march=native compiles for exactly these)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    keep = [line for line in text.splitlines() if line.startswith(("model name", "flags"))]
    return "\n".join(sorted(set(keep)))


def library_path(cache_dir: Path) -> Path:
    """Where the build for this source, torch, compiler and CPU lives."""
    key = "|".join(
        [
            *(hashlib.sha256(p.read_bytes()).hexdigest() for p in (SOURCE, *HEADERS)),
            torch.__version__,
            _compiler(),
            " ".join(FLAGS),
            _arch(),
            _cpu_flags(),
        ]
    )
    return cache_dir / "native" / f"flat-{hashlib.sha256(key.encode()).hexdigest()[:16]}.so"


def _command(out: Path) -> list[str]:
    root = Path(torch.__file__).parent
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    return [
        _compiler(),
        *FLAGS,
        _arch(),
        "-std=c++20",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-I{root / 'include'}",
        str(SOURCE),
        "-o",
        str(out),
        f"-L{root / 'lib'}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{root / 'lib'}",
    ]


def build(cache_dir: Path) -> Path:
    """The compiled core for this machine, compiled now if it is not kept yet (about ten
    seconds). RuntimeError, with the compiler's last words, when it cannot be built."""
    path = library_path(cache_dir)
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".so.tmp")
    os.close(fd)
    try:
        try:
            done = subprocess.run(
                _command(Path(tmp)), capture_output=True, text=True, timeout=600, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"{_compiler()} could not run: {exc}") from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{_compiler()} failed: {last}")
        os.replace(tmp, path)  # atomic: a concurrent build of the same key writes the same
        # Builds for another source or torch (whatever their name: an older version's too).
        for older in path.parent.glob("*.so"):
            if older != path and os.environ.get(ARCH_ENV) is None:
                with contextlib.suppress(OSError):
                    older.unlink()
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def load(cache_dir: Path | None, say: Callable[[str], None] | None = None) -> str | None:
    """Loads the compiled core (building it first where needed). None when the ops are
    ready, else why they are not (the caller falls back to the Python forward)."""
    global _loaded
    if os.environ.get(SWITCH, "1") == "0":
        return f"{SWITCH}=0"
    if cache_dir is None:
        return "no cache directory to keep the compiled forward in"
    with _lock:
        if _loaded is not None:
            return None
        path = library_path(cache_dir)
        if not path.is_file() and say is not None:
            say("compiling the flat engine's forward for this CPU (once, about ten seconds)")
        try:
            path = build(cache_dir)
            try:
                torch.ops.load_library(str(path))  # type: ignore[no-untyped-call]
            except OSError as exc:  # a damaged file: compiled again, once
                if say is not None:
                    say(f"the compiled forward {path.name} is unusable ({exc}); compiling again")
                path.unlink(missing_ok=True)
                path = build(cache_dir)
                torch.ops.load_library(str(path))  # type: ignore[no-untyped-call]
        except (RuntimeError, OSError) as exc:
            return str(exc)
        _loaded = path
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m samchat.engines.flat.native.build CACHE_DIR", file=sys.stderr)
        return 2
    try:
        path = build(Path(argv[0]))
    except RuntimeError as exc:
        print(
            f"warning: the flat engine's native forward was not built ({exc}); samchat will "
            "use its slower Python forward",
            file=sys.stderr,
        )
        return 0
    print(f"the flat engine's native forward: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
