"""A child process of the campaign, and the acknowledgements it prints after each commit."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parents[1]
ROOT = SCRIPTS.parent


@dataclass
class Ack:
    kind: str  # doc | msg | idx
    key: str
    hash: str


class Child:
    """A child process whose acknowledgements (`ack KIND ID HASH` lines) are read as they come."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, **kw: Any) -> None:
        self.proc: subprocess.Popen[bytes] = subprocess.Popen(
            argv,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            stdin=subprocess.DEVNULL,  # `samchat ask` would add piped stdin to its question
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **kw,
        )
        self.acks: list[Ack] = []
        self.stdout: list[str] = []
        self.first = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @classmethod
    def program(cls, name: str, *args: str, **kw: Any) -> Child:
        """One of the child programs in fault_campaign/children, run as a module."""
        path = os.pathsep.join((str(ROOT), str(SCRIPTS)))
        argv = [sys.executable, "-m", f"fault_campaign.children.{name}", *args]
        return cls(argv, env={"PYTHONPATH": path}, **kw)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            parts = line.split()
            if len(parts) == 4 and parts[0] == "ack":
                self.acks.append(Ack(parts[1], parts[2], parts[3]))
                self.first.set()
            else:
                self.stdout.append(line)
        self.first.set()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGKILL)
        self.wait()

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout)
        self._reader.join(10)  # what the child wrote before it died is still in the pipe
        return code

    def stderr(self) -> str:
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")
