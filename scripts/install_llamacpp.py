"""Install llama-cpp-python, samchat's llama.cpp engine, built for this machine's CPU.

    python scripts/install_llamacpp.py [PYTHON]

PYTHON is the interpreter to install into (default: the one running this script); samchat and
its default model must already be installed there (`make setup` runs this after both). PyPI has
only the source of llama-cpp-python, so this builds it: with the CPU features /proc/cpuinfo
reports, never with -march=native (see `cmake_args`). CMAKE_ARGS from the environment go last,
so they override ours (e.g. -DGGML_CUDA=ON). The full build log goes next to PYTHON's
environment (llamacpp-build.log).

Then it checks the build: the default model decodes a batch of 8 tokens through samchat's
LlamaCppEngine in a child process. A build that fails, or dies on that check, is removed and
samchat runs its torch engine instead: this script always exits 0, so setup goes on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIST = "llama-cpp-python"
EXTRA = "llamacpp"  # pyproject's optional extra that pins DIST: the one place the pin lives
HEARTBEAT_S = 60.0
PROBE_TIMEOUT_S = 600
FALLBACK = "samchat will use the torch engine"

_AVX512 = ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")  # what -DGGML_AVX512 uses
# ggml's x86 options and the /proc/cpuinfo flags each needs. With GGML_NATIVE=OFF ggml turns
# SSE42, AVX, AVX2, BMI2, FMA and F16C on by default, so each one is set either way.
X86_OPTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", _AVX512),
    ("GGML_AVX512_VBMI", (*_AVX512, "avx512vbmi")),
    ("GGML_AVX512_VNNI", (*_AVX512, "avx512_vnni")),
    ("GGML_AVX512_BF16", (*_AVX512, "avx512_bf16")),
)
# AMX stays off: a VM can report amx_* flags without letting programs use the tiles, and ggml's
# AMX kernels then die with SIGILL (on `tilezero`) on every batch of two or more tokens, which
# is each prefill and each draft verification.
AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")

# Run in PYTHON: what is installed there, and where its environment lives.
_INSPECT = """
import importlib.metadata, json, sys
state = {"prefix": sys.prefix, "version": None, "installed": True, "error": None}
try:
    importlib.metadata.version("llama-cpp-python")
except importlib.metadata.PackageNotFoundError:
    state["installed"] = False
if state["installed"]:
    try:
        import llama_cpp
        state["version"] = llama_cpp.__version__
    except Exception as exc:
        state["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(state))
"""

# Run in PYTHON after the build: a batched decode through the engine samchat will use. Exit 3:
# it could not run (samchat or its default model missing), which says nothing about the build.
PROBE = """
import sys
try:
    from types import SimpleNamespace
    import numpy as np
    from samchat.engines.llamacpp.engine import LlamaCppEngine
    from samchat.engines.llamacpp.model import LlamaWeights
    from samchat.models.default import bundled_gguf
    path = bundled_gguf()
except Exception as exc:
    print(f"{type(exc).__name__}: {exc}")
    sys.exit(3)
weights = LlamaWeights.load(path)
engine = LlamaCppEngine(SimpleNamespace(model=weights), n_ctx=256)
engine.prefill(list(range(1, 9)))
logits = engine.forward(list(range(9, 17)))  # 8 tokens in one batch: where bad kernels die
assert tuple(logits.shape) == (8, weights.n_vocab), tuple(logits.shape)
assert bool(np.isfinite(logits).all()), "the logits are not finite"
engine.close()
print("ok")
"""


def pinned_requirement(pyproject: Path = ROOT / "pyproject.toml") -> str:
    """The `DIST==VERSION` requirement in pyproject's `llamacpp` extra."""
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    for req in extras[EXTRA]:
        name, _, pin = str(req).partition("==")
        if name.strip().lower().replace("_", "-") == DIST and pin.strip():
            return f"{DIST}=={pin.strip()}"
    raise SystemExit(f"{pyproject}: the {EXTRA!r} extra must pin {DIST}==VERSION")


def cpuinfo_flags(path: Path = Path("/proc/cpuinfo")) -> set[str] | None:
    """The first processor's flags, or None where there is no /proc/cpuinfo."""
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return None


def cmake_args(machine: str, flags: set[str] | None) -> list[str]:
    """CMake options for llama.cpp on this CPU.

    On x86-64 with /proc/cpuinfo: no -march=native (it would also compile in AMX where the CPU
    reports it), each instruction set on exactly when the CPU reports it, AMX off. Elsewhere
    llama.cpp's own defaults decide (AMX exists only on x86-64).
    """
    args = ["-DLLAVA_BUILD=OFF"]  # the multimodal (mtmd) library: samchat runs text models
    if machine.lower() not in ("x86_64", "amd64") or flags is None:
        return args
    args.append("-DGGML_NATIVE=OFF")
    for option, needs in X86_OPTIONS:
        args.append(f"-D{option}={'ON' if flags.issuperset(needs) else 'OFF'}")
    args.extend(f"-D{option}=OFF" for option in AMX_OPTIONS)
    return args


def features(args: list[str]) -> str:
    """The instruction sets args turn on, e.g. 'AVX, AVX2, FMA'."""
    on = [a.removeprefix("-DGGML_").removesuffix("=ON") for a in args if a.endswith("=ON")]
    return ", ".join(on) if on else "llama.cpp's default CPU options"


def cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def estimate(n_cores: int) -> str:
    """The build's usual duration: about 6-10 minutes on 2 cores, measured."""
    low, high = math.ceil(12 / n_cores), math.ceil(20 / n_cores)
    return f"about {low}-{high} minutes on {n_cores} core{'s' if n_cores > 1 else ''}"


def inspect(python: str) -> dict[str, object]:
    try:
        proc = subprocess.run(
            [python, "-c", _INSPECT], capture_output=True, text=True, timeout=300, check=False
        )
    except subprocess.TimeoutExpired:
        return {"prefix": None, "version": None, "installed": True, "error": "timed out"}
    try:
        state: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):  # the import itself crashed
        return {"prefix": None, "version": None, "installed": True, "error": _died(proc)}
    return state


def _died(proc: subprocess.CompletedProcess[str]) -> str:
    """Why a child process failed, in a few words."""
    if proc.returncode < 0:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        if name == "SIGILL":
            return "it died of SIGILL, an instruction this CPU does not allow"
        return f"it died of {name}"
    lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit code {proc.returncode}"
    return last if len(last) <= 200 else last[:197] + "..."


def log_path(prefix: object) -> Path:
    """llamacpp-build.log in the target environment, or in the temp dir if that is read-only."""
    if isinstance(prefix, str) and os.access(prefix, os.W_OK):
        return Path(prefix) / "llamacpp-build.log"
    return Path(tempfile.gettempdir()) / "samchat-llamacpp-build.log"


def _progress(log: Path) -> str:
    """The build step ninja last reported in the log, e.g. ', step 120/243'."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 65536))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    steps = re.findall(r"^\s*\[(\d+)/(\d+)\]", tail, re.MULTILINE)  # pip -v indents them
    return f", step {steps[-1][0]}/{steps[-1][1]}" if steps else ""


def build(python: str, pin: str, args: list[str], log: Path) -> int:
    """pip-install pin from source with args; pip's full output goes to log. Its exit code."""
    env = dict(os.environ)
    env["CMAKE_ARGS"] = " ".join([*args, env.get("CMAKE_ARGS", "")]).strip()
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(cores()))
    # --no-cache-dir: pip's wheel cache ignores CMAKE_ARGS and could hand back an earlier
    # build made for another CPU (or with -march=native).
    cmd = [python, "-m", "pip", "install", "-v", "--no-cache-dir", "--no-binary", DIST, pin]
    start = time.monotonic()
    with log.open("a") as out:
        out.write(f"CMAKE_ARGS={env['CMAKE_ARGS']}\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env
        )
        try:
            next_beat = start + HEARTBEAT_S
            while proc.poll() is None:
                time.sleep(1.0)
                if time.monotonic() >= next_beat:
                    minutes = round((time.monotonic() - start) / 60)
                    print(f"  still building llama.cpp ({minutes} min{_progress(log)})", flush=True)
                    next_beat += HEARTBEAT_S
        except BaseException:  # Ctrl-C: stop the build too
            proc.terminate()
            proc.wait()
            raise
        out.write(f"\n# pip exited {proc.returncode} after {time.monotonic() - start:.0f} s\n")
    return proc.returncode


def probe(python: str, code: str = PROBE) -> tuple[bool | None, str]:
    """(True, "") when the build decodes a batch; (False, why) when it fails or dies;
    (None, why) when the probe could not run at all."""
    try:
        proc = subprocess.run(
            [python, "-c", code],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
    except subprocess.TimeoutExpired:
        return False, f"a batched decode did not finish in {PROBE_TIMEOUT_S} s"
    if proc.returncode == 0:
        return True, ""
    if proc.returncode == 3:
        return None, _died(proc)
    return False, _died(proc)


def uninstall(python: str, log: Path) -> None:
    with log.open("a") as out:
        subprocess.run(
            [python, "-m", "pip", "uninstall", "-y", DIST],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("python", nargs="?", default=sys.executable, help="target interpreter")
    opts = parser.parse_args(argv)
    python: str = opts.python
    pin = pinned_requirement()
    want = pin.partition("==")[2]
    state = inspect(python)
    if state["version"] == want:
        print(f"llama.cpp engine: {DIST} {want} already installed")
        return 0
    log = log_path(state["prefix"])
    log.write_text("")  # this run's log only
    if state["installed"] and state["version"] is None:  # present but broken: start afresh
        uninstall(python, log)
    args = cmake_args(platform.machine(), cpuinfo_flags())
    what = f"{features(args)}; {estimate(cores())}"
    print(f"building llama.cpp for this CPU ({what}) ...", flush=True)
    start = time.monotonic()
    if build(python, pin, args, log) != 0:
        print(f"llama.cpp build failed (log: {log}); {FALLBACK}")
        return 0
    took = f"built in {(time.monotonic() - start) / 60:.1f} min"
    ok, why = probe(python)
    if ok is None:
        print(f"llama.cpp engine: {DIST} {want} {took}, not checked ({why})")
    elif ok:
        print(f"llama.cpp engine: {DIST} {want} {took}, batched decoding checked")
    else:
        with log.open("a") as out:
            out.write(f"\n# probe failed: {why}\n")
        uninstall(python, log)
        print(f"llama.cpp build unusable on this CPU ({why}); {FALLBACK}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
