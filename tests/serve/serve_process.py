"""A real `samchat serve` process on 127.0.0.1 (a free port), and what the tests ask it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import openai
import pytest

from samchat.models.engine_choice import STEPS_ENV
from tests.homes import share_costs

READY_S = 300  # model load and cost-curve measurement on a busy machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def home_env(home: Path) -> dict[str, str]:
    """The environment of a samchat process whose data, cache and config live under `home`
    (module-scoped servers start before the per-test directories are set)."""
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    # A server on a GGUF with no engine record measures the engines after its first answer:
    # with few steps, so that it takes the test's time only briefly.
    env.setdefault(STEPS_ENV, "2")
    for name in ("DATA", "CACHE", "CONFIG"):
        env[f"SAMCHAT_{name}_DIR"] = str(home / name.lower())
    share_costs(home / "cache")
    return env


class Server:
    """One `samchat serve` process; its stderr goes to a file the tests read."""

    def __init__(self, home: Path, *args: str, api_key: str | None = None) -> None:
        self.home = home
        self.port = free_port()
        self.api_key = api_key
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = home / "serve.log"
        home.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "samchat", "serve", "--port", str(self.port), *args]
        if api_key:
            cmd += ["--api-key", api_key]
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=log, env=home_env(home)
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"samchat serve exited {self.proc.returncode}: {self.stderr()}")
            try:
                status, _ = self.request("GET", "/models", auth=self.api_key)
            except OSError:
                time.sleep(0.5)
                continue
            if status == 200:
                return
        self.stop()
        pytest.fail(f"samchat serve did not answer within {READY_S} s: {self.stderr()}")

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def client(self, **options: Any) -> openai.OpenAI:
        key = options.pop("api_key", self.api_key or "unused")
        return openai.OpenAI(
            base_url=self.base_url, api_key=key, max_retries=0, timeout=300, **options
        )

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        auth: str | None = None,
    ) -> tuple[int, Any]:
        """A raw request (what the openai package will not send); (status, JSON body)."""
        headers = {"Content-Type": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {auth}"
        req = urllib.request.Request(
            self.base_url + path, data=body, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(req, timeout=300) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    def stop(self) -> int:
        """SIGTERM, then the exit status (killed after a minute)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def ask(home: Path, prompt: str, *args: str) -> str:
    """`samchat ask`'s reply (stdout without the newline it ends with)."""
    result = subprocess.run(
        [sys.executable, "-m", "samchat", "ask", prompt, "--no-save", *args],
        capture_output=True,
        text=True,
        env=home_env(home),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("\n")
    return result.stdout[:-1]


def streamed(client: openai.OpenAI, **request: Any) -> tuple[str, list[Any]]:
    """The text of a streamed reply and its chunks."""
    chunks = list(client.chat.completions.create(stream=True, **request))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return text, chunks
