"""Suffix automata over token ids: a mypyc-compiled core with an identical pure-Python fallback,
and a growable memory-mapped static index.

The core lives in `automaton.py`. When it was compiled (`pip install .`), importing it loads the
extension; otherwise, or with SAMCHAT_PURE_SAM=1, the same source runs interpreted. An extension
built from another automaton.py, damaged since (setup.py records both hashes in
`_core_build.sha256`), or failing to import is not used: the pure core runs, with one warning on
stderr, and `compiled_problem()` says why.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

_PURE_NAME = "samchat.sam._automaton_pure"
_CORE_NAME = f"{__name__}.automaton"
_SOURCE = Path(__file__).with_name("automaton.py")
_RECORD = Path(__file__).with_name("_core_build.sha256")  # written by setup.py
_NOT_BUILT = "is not built"

# logging, not warnings.warn: with no logging set up, its last-resort handler prints just the
# message, once, on stderr (warnings.warn adds file:line and a source line, and `-W error`
# would turn a harmless fallback into a crash).
_log = logging.getLogger(__name__)


def load_pure() -> ModuleType:
    """The automaton module executed from its .py source, never the compiled extension."""
    loaded = sys.modules.get(_PURE_NAME)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(_PURE_NAME, _SOURCE)
    if spec is None or spec.loader is None:  # pragma: no cover - the source ships with the package
        raise ImportError(f"cannot load {_SOURCE}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_PURE_NAME] = module
    spec.loader.exec_module(module)
    return module


def is_compiled(module: ModuleType) -> bool:
    return not str(getattr(module, "__file__", "")).endswith(".py")


def _extension() -> Path | None:
    """The extension file that importing `automaton` would load, if any."""
    stem = _SOURCE.with_suffix("")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = Path(f"{stem}{suffix}")
        if path.exists():
            return path
    return None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stale_cause(extension: Path) -> str | None:
    """Why the compiled core may not match automaton.py, or None when it does.

    Checked before the import: stale compiled code may behave differently from the source, and a
    truncated library can kill the process (SIGBUS) instead of raising ImportError."""
    try:
        source = _digest(_SOURCE)
    except OSError:
        return None  # no source to compare with (nor to fall back to): trust the extension
    try:
        lines = [line.split(maxsplit=1) for line in _RECORD.read_text().splitlines()]
        recorded = {name.strip(): digest for digest, name in lines}
    except (OSError, ValueError):
        return "has no build record to check against automaton.py"
    if recorded.get(_SOURCE.name) != source:
        return "is stale: automaton.py changed since it was built"
    if extension.name not in recorded:
        return f"has no build record for {extension.name}"
    for name, digest in recorded.items():
        try:
            intact = _digest(_SOURCE.with_name(name)) == digest
        except OSError:
            intact = False
        if not intact:
            return f"is damaged: {name} differs from the build"
    return None


def _select() -> tuple[ModuleType, str | None]:
    """The core to use, and why it is not the compiled one (None: it is, or pure was asked for)."""
    if os.environ.get("SAMCHAT_PURE_SAM", "") not in ("", "0"):
        return load_pure(), None
    extension = _extension()
    if extension is None:
        return importlib.import_module(_CORE_NAME), _NOT_BUILT
    cause = _stale_cause(extension)
    if cause is None:
        try:
            return importlib.import_module(_CORE_NAME), None
        except Exception as exc:  # ABI drift, a truncated file, a missing symbol...
            detail = (str(exc).splitlines() or [""])[0]
            cause = f"failed to import ({type(exc).__name__}: {detail})"
    pure = load_pure()
    # `from samchat.sam import automaton` now finds the pure core, not the unusable extension.
    sys.modules[_CORE_NAME] = pure
    _log.warning("samchat: warning: %s", _problem(cause, short=False))
    return pure, cause


def _problem(cause: str, short: bool) -> str:
    if short:
        return f"compiled core {cause}; run `make setup`"
    verb = "build" if cause == _NOT_BUILT else "rebuild"
    return (
        f"the compiled SAM core {cause}; using the pure-Python core: run `make setup` to {verb} it"
    )


impl, _cause = _select()
_backend = "compiled" if is_compiled(impl) else "pure"


def backend() -> str:
    """ "compiled" when the mypyc extension is in use, else "pure"."""
    return _backend


def compiled_problem(short: bool = False) -> str | None:
    """Why the compiled core is not in use, as one line; None when it is or SAMCHAT_PURE_SAM=1.

    short: the form `samchat doctor` shows after "pure", without the fallback sentence."""
    return None if _cause is None else _problem(_cause, short)


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
    "compiled_problem",
    "impl",
    "is_compiled",
    "load_pure",
]
