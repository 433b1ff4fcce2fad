"""Real remote servers, started once per run: `samchat serve` (with an API key) and
llama-cpp-python's own OpenAI-compatible server, both on the bundled GGUF on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from samchat.models.default import bundled_gguf
from tests.serve.serve_process import Server, free_port

KEY = "sk-remote-test"
ALIAS = "smollm2-q4"  # the name llama-cpp-python's server gives the model
READY_S = 120


class LlamaServer:
    """`python -m llama_cpp.server` on the bundled GGUF (a server that is not samchat)."""

    def __init__(self, home: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.log = home / "llama-server.log"
        home.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_gguf()),
            "--model_alias", ALIAS, "--host", "127.0.0.1", "--port", str(self.port),
            "--n_ctx", "2048", "--n_threads", "1",
        ]  # fmt: skip
        with self.log.open("w") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited {self.proc.returncode}: {self.output()}")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=5) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        self.stop()
        pytest.fail(f"llama_cpp.server did not answer within {READY_S} s: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture(scope="session")
def samchat_server(
    tmp_path_factory: pytest.TempPathFactory, shared_costs: Path
) -> Iterator[Server]:
    """`samchat serve --api-key KEY --save` on llama.cpp, reading the run's cost curves (hence
    shared_costs: it must exist before the server starts). The engine is named: left to auto,
    the server would measure the engines after its first answer and might switch, and the
    tests compare its replies with llama.cpp's here."""
    running = Server(
        tmp_path_factory.mktemp("remote-samchat"), "--save", "--engine", "llamacpp", api_key=KEY
    )
    yield running
    assert running.stop() == 0, running.stderr()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    running = LlamaServer(tmp_path_factory.mktemp("remote-llama"))
    yield running
    running.stop()


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    """samchat_server's key, where a URL with no [endpoints] entry takes it from."""
    monkeypatch.setenv("SAMCHAT_API_KEY", KEY)
    return KEY


def write_config(text: str) -> Path:
    """config.toml of this test's samchat (its config directory is the test's own)."""
    path = Path(os.environ["SAMCHAT_CONFIG_DIR"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
