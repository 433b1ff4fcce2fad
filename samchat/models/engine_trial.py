"""The engines measured for a GGUF model that the app or `serve` runs with its engine left to
auto and no kept record (engine_choice.py keeps it): in the background, after its first answer.

- A candidate's weights are prepared in a child process at the idle scheduling policy (the flat
  engine packs a GGUF once, and builds its native forward once: a minute on a large file), so
  no answer waits for that; the engine thread only checks on the child.
- The timing runs on the engine thread while it is idle, and checks `wanted()` between one-token
  steps: a prompt or request that comes meanwhile abandons it (MeasurementCancelled) after at
  most one step or one load, and the next idle spell measures again from the start (what the
  child packed is kept). Quitting abandons it the same way and ends the child.
- Each load is refused before it starts where it would not fit in the memory left beside the
  model running now (engines/memory.py, in the loaders): that candidate is recorded as refused.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from samchat.engines.costs import MeasurementCancelled
from samchat.engines.registry import GGUF_CPU_CANDIDATES, engine_kind
from samchat.errors import EngineDeclinedError, SamchatError, one_line
from samchat.models.engine_choice import (
    EngineSpeed,
    Refusal,
    gguf_file,
    keep,
    kept,
    label,
    left_to_auto,
    steps,
    time_steps,
)
from samchat.models.loader import LoadedModel, ModelSpec, choose_engine

Say = Callable[[str], None]
Wanted = Callable[[], bool]  # true: give way now (a prompt or request waits, or the app quits)

POLL_S = 0.05  # how often the engine thread checks on the child that prepares weights
_DECLINED = 3  # the child's exit status where the engine declines the file (a refusal)


@dataclass
class TrialResult:
    speeds: list[EngineSpeed]
    refused: list[Refusal]
    # The fastest candidate, loaded, where it is not the model that runs now (None: it is).
    faster: LoadedModel | None

    @property
    def best(self) -> EngineSpeed | None:
        return min(self.speeds, key=lambda s: s.ms_per_token) if self.speeds else None


class Trial:
    """The measurement owed for one model; run() again after it gave way."""

    def __init__(self, spec: ModelSpec, cache_dir: Path) -> None:
        self.spec = spec  # as the user named it: the engine and format left to auto
        self.cache_dir = cache_dir
        self._child: subprocess.Popen[str] | None = None
        self._prepared: dict[str, str | None] = {}  # engine -> why it was declined, or None
        self._closed = False

    @staticmethod
    def owed(spec: ModelSpec, cache_dir: Path | None, lm: object) -> Trial | None:
        """A Trial where lm runs here a GGUF file that spec leaves to auto, and nothing is
        kept for that file on this CPU and build; else None."""
        if cache_dir is None or not isinstance(lm, LoadedModel) or not left_to_auto(spec):
            return None
        if gguf_file(spec) is None or kept(cache_dir, spec) is not None:
            return None
        return Trial(spec, cache_dir)

    def run(self, lm: LoadedModel, wanted: Wanted, say: Say) -> TrialResult:
        """Each candidate timed (lm for its own engine), the result kept; raises
        MeasurementCancelled as soon as wanted() is true."""
        path = gguf_file(self.spec)
        if path is None:
            raise SamchatError(f"{self.spec.source} is no longer a GGUF file")
        speeds: list[EngineSpeed] = []
        refused: list[Refusal] = []
        loaded: dict[str, LoadedModel] = {lm.engine: lm}
        for engine, dtype in GGUF_CPU_CANDIDATES:
            candidate = replace(self.spec, engine=engine, dtype=dtype, auto_engine=False)
            try:
                choose_engine(candidate)  # installed, and able to run the file
                if engine not in loaded:
                    loaded[engine] = self._load(candidate, wanted, say)
                say(f"timing {label(engine, dtype)}")
                speeds.append(
                    time_steps(loaded[engine], (engine, dtype), self.cache_dir, steps(), wanted)
                )
            except MeasurementCancelled:
                raise
            except SamchatError as exc:
                refused.append(Refusal(engine, dtype, one_line(exc)))
                loaded.pop(engine, None)  # its memory back before the next candidate
        keep(self.cache_dir, path, speeds, refused)
        result = TrialResult(speeds, refused, None)
        best = result.best
        if best is not None and best.engine != lm.engine:
            result.faster = loaded[best.engine]
        return result

    def _load(self, candidate: ModelSpec, wanted: Wanted, say: Say) -> LoadedModel:
        """candidate's model, loaded here after its weights were prepared in the child."""
        from samchat.models import load_model

        if not engine_kind(candidate.engine).native_gguf:  # it converts or packs the file
            declined = self._prepare(candidate, wanted, say)
            if declined is not None:
                raise EngineDeclinedError(declined)
        if wanted():
            raise MeasurementCancelled("the engines' measurement gave way")
        return load_model(candidate, progress=say)

    def _prepare(self, candidate: ModelSpec, wanted: Wanted, say: Say) -> str | None:
        """Why candidate's engine declines the file, or None once its weights are ready."""
        engine = candidate.engine
        if engine in self._prepared:
            return self._prepared[engine]
        if self._child is None:
            say(f"preparing {engine} (in the background, once)")
            source = candidate.source or ""
            code = "import sys; from samchat.models import engine_trial as t; sys.exit(t.main())"
            self._child = subprocess.Popen(
                [sys.executable, "-c", code, engine, candidate.dtype, source],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
        child = self._child
        while child.poll() is None:
            if wanted():  # the child goes on at the idle policy; the next try waits for it
                raise MeasurementCancelled("the engines' measurement gave way")
            time.sleep(POLL_S)
        self._child = None
        try:
            out = child.communicate()[0].strip()
        except (OSError, ValueError):  # close() reaped it meanwhile, from another thread
            out = ""
        if wanted() or self._closed:  # ended by close(): no verdict on the engine
            raise MeasurementCancelled("the engines' measurement gave way")
        if child.returncode == 0:
            self._prepared[engine] = None
        elif child.returncode == _DECLINED:
            self._prepared[engine] = out or f"{engine} declined the file"
        else:
            raise SamchatError(out or f"preparing {engine} failed (exit {child.returncode})")
        return self._prepared[engine]

    def close(self) -> None:
        """Ends the child that prepares weights, if one runs (the app or server quits)."""
        self._closed = True
        child, self._child = self._child, None
        if child is not None:
            if child.poll() is None:
                child.kill()
            child.communicate()  # reaped, its pipe closed


def _idle_and_orphan_proof() -> None:
    """The child takes the CPU only when nothing else wants it, and ends with its parent."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    with contextlib.suppress(OSError, AttributeError):
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent ended before the line above
            os._exit(1)


def main() -> int:
    """The child: loads argv's model on argv's engine once (packing and building what that
    engine keeps), says why it declines the file if it does, and ends."""
    _idle_and_orphan_proof()
    from samchat.models import load_model

    engine, dtype, source = sys.argv[1:4]
    spec = ModelSpec(source=source or None, engine=engine, dtype=dtype)
    try:
        load_model(spec)
    except EngineDeclinedError as exc:
        print(one_line(exc))
        return _DECLINED
    except SamchatError as exc:
        print(one_line(exc))
        return 1
    return 0
