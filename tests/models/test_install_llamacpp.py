"""scripts/install_llamacpp.py: the CMake options it derives from the CPU, the pin it reads,
its probe of a build, and what it prints when it skips, fails or finds a build unusable."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "install_llamacpp.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("install_llamacpp", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


inst = _load()

# A Sapphire Rapids guest: it reports AMX, which its VM may not allow.
SPR = {
    *("sse4_2", "avx", "avx2", "bmi2", "fma", "f16c", "avx_vnni"),
    *("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    *("avx512vbmi", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16"),
}


def _options(args: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("-D").split("=", 1) for a in args)


def test_x86_options_follow_the_cpu_flags_and_amx_stays_off() -> None:
    opts = _options(inst.cmake_args("x86_64", SPR))
    assert opts["GGML_NATIVE"] == "OFF"
    assert opts["LLAVA_BUILD"] == "OFF"
    for name in ("AVX", "AVX2", "FMA", "F16C", "AVX512", "AVX512_VNNI", "AVX512_BF16"):
        assert opts[f"GGML_{name}"] == "ON", name
    assert {opts[f"GGML_AMX_{k}"] for k in ("TILE", "INT8", "BF16")} == {"OFF"}


def test_avx512_needs_every_subset_ggml_compiles_it_with() -> None:
    opts = _options(inst.cmake_args("x86_64", SPR - {"avx512bw"}))
    assert opts["GGML_AVX2"] == "ON"
    for name in ("AVX512", "AVX512_VBMI", "AVX512_VNNI", "AVX512_BF16"):
        assert opts[f"GGML_{name}"] == "OFF", name


def test_an_old_cpu_gets_ggmls_default_on_sets_turned_off() -> None:
    args = inst.cmake_args("x86_64", {"sse4_2"})
    opts = _options(args)
    for name in ("AVX", "AVX2", "BMI2", "FMA", "F16C"):  # on by default once NATIVE is off
        assert opts[f"GGML_{name}"] == "OFF", name
    assert inst.features(args) == "SSE42"


def test_other_machines_keep_llamacpps_own_defaults() -> None:
    assert inst.cmake_args("aarch64", SPR) == ["-DLLAVA_BUILD=OFF"]
    assert inst.cmake_args("x86_64", None) == ["-DLLAVA_BUILD=OFF"]
    assert inst.features(["-DLLAVA_BUILD=OFF"]) == "llama.cpp's default CPU options"


def test_cpuinfo_flags_reads_the_first_processor(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t: sse\n")
    assert inst.cpuinfo_flags(info) == {"fpu", "avx2", "fma"}
    assert inst.cpuinfo_flags(tmp_path / "missing") is None


def test_the_pin_comes_from_pyproject_and_is_what_is_installed() -> None:
    pin = inst.pinned_requirement()
    assert pin == f"llama-cpp-python=={importlib.metadata.version('llama-cpp-python')}"


def test_the_probe_names_a_crash_and_a_failure() -> None:
    sigill = "import os, signal; os.kill(os.getpid(), signal.SIGILL)"
    assert inst.probe(sys.executable, sigill) == (
        False,
        "it died of SIGILL, an instruction this CPU does not allow",
    )
    assert inst.probe(sys.executable, "raise RuntimeError('bad logits')") == (
        False,
        "RuntimeError: bad logits",
    )
    assert inst.probe(sys.executable, "print('no model'); raise SystemExit(3)") == (
        None,
        "no model",
    )


@pytest.mark.model
def test_the_probe_passes_on_the_installed_build() -> None:
    assert inst.probe(sys.executable) == (True, "")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )


def test_an_installed_build_is_skipped_quickly() -> None:
    start = time.monotonic()
    result = _run()
    assert result.returncode == 0, result.stderr
    name, _, version = inst.pinned_requirement().partition("==")
    assert result.stdout == f"llama.cpp engine: {name} {version} already installed\n"
    assert time.monotonic() - start < 60


def _fake_python(tmp_path: Path, pip: str, probe: str) -> Path:
    """An interpreter stand-in: llama-cpp-python absent, pip and the probe as given."""
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ]; then echo "pip $*"; [ "$3" = uninstall ] && exit 0; {pip}; fi\n'
        'case "$2" in *json.dumps*)\n'
        f'  echo \'{{"prefix": "{tmp_path}", "version": null, "installed": false, '
        '"error": null}\'; exit 0;;\n'
        "esac\n"
        f"{probe}\n"
    )
    python.chmod(0o755)
    return python


def test_a_failed_build_is_one_line_and_setup_goes_on(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, pip="echo 'CMake Error: no compiler'; exit 1", probe="exit 0")
    result = _run(str(python))
    assert result.returncode == 0, result.stderr
    log = tmp_path / "llamacpp-build.log"
    assert result.stdout.splitlines()[-1] == (
        f"llama.cpp build failed (log: {log}); samchat will use the torch engine"
    )
    text = log.read_text()
    assert "CMake Error: no compiler" in text
    assert "CMAKE_ARGS=-DLLAVA_BUILD=OFF" in text  # the options are logged with pip's output


def test_a_build_that_crashes_is_removed(tmp_path: Path) -> None:
    python = _fake_python(tmp_path, pip="exit 0", probe="kill -ILL $$")
    result = _run(str(python))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "llama.cpp build unusable on this CPU (it died of SIGILL, an instruction this CPU "
        "does not allow); samchat will use the torch engine"
    )
    log = (tmp_path / "llamacpp-build.log").read_text()
    assert "pip -m pip uninstall -y llama-cpp-python" in log
