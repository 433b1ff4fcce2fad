"""Suffix automata over token ids: a mypyc-compiled core with an identical pure-Python fallback,
and a growable memory-mapped static index.

The core lives in `automaton.py`. When it was compiled (`pip install .`), importing it loads the
extension; otherwise, or with SAMCHAT_PURE_SAM=1, the same source runs interpreted.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_PURE_NAME = "samchat.sam._automaton_pure"


def load_pure() -> ModuleType:
    """The automaton module executed from its .py source, never the compiled extension."""
    loaded = sys.modules.get(_PURE_NAME)
    if loaded is not None:
        return loaded
    path = Path(__file__).with_name("automaton.py")
    spec = importlib.util.spec_from_file_location(_PURE_NAME, path)
    if spec is None or spec.loader is None:  # pragma: no cover - the source ships with the package
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PURE_NAME] = module
    spec.loader.exec_module(module)
    return module


def is_compiled(module: ModuleType) -> bool:
    return not str(getattr(module, "__file__", "")).endswith(".py")


def _select() -> tuple[ModuleType, str]:
    if os.environ.get("SAMCHAT_PURE_SAM", "") not in ("", "0"):
        return load_pure(), "pure"
    from samchat.sam import automaton

    return automaton, "compiled" if is_compiled(automaton) else "pure"


impl, _backend = _select()


def backend() -> str:
    """ "compiled" when the mypyc extension is in use, else "pure"."""
    return _backend


if TYPE_CHECKING:
    from samchat.sam.automaton import (
        Automaton,
        DeadSpans,
        MappedAutomaton,
        MatchCursor,
        MultiCursor,
        SuffixAutomaton,
        build,
    )
else:
    Automaton = impl.Automaton
    DeadSpans = impl.DeadSpans
    MappedAutomaton = impl.MappedAutomaton
    MatchCursor = impl.MatchCursor
    MultiCursor = impl.MultiCursor
    SuffixAutomaton = impl.SuffixAutomaton
    build = impl.build

__all__ = [
    "Automaton",
    "DeadSpans",
    "MappedAutomaton",
    "MatchCursor",
    "MultiCursor",
    "SuffixAutomaton",
    "backend",
    "build",
    "impl",
    "is_compiled",
    "load_pure",
]
