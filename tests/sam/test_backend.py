"""Which implementation runs, and that the compiled one is really there after an install."""

from __future__ import annotations

import os
import subprocess
import sys

import samchat.sam as sam_pkg
from samchat.sam import automaton


def test_extension_is_built() -> None:
    # `pip install .` / `pip install -e .` compile samchat/sam/automaton.py with mypyc.
    assert sam_pkg.is_compiled(automaton), "run `pip install -e .` to build the mypyc extension"
    assert sam_pkg.backend() in ("compiled", "pure")


def test_pure_fallback_is_the_source() -> None:
    pure = sam_pkg.load_pure()
    assert pure.__file__ is not None and pure.__file__.endswith("automaton.py")
    assert not sam_pkg.is_compiled(pure)


def test_env_switch_selects_pure() -> None:
    code = "import samchat.sam as s; print(s.backend(), s.SuffixAutomaton.__module__)"
    env = {**os.environ, "SAMCHAT_PURE_SAM": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["pure", "samchat.sam._automaton_pure"]
    env["SAMCHAT_PURE_SAM"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert out[0] == ("compiled" if sam_pkg.is_compiled(automaton) else "pure")
