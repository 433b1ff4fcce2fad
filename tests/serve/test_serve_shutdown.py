"""SIGTERM stops `samchat serve` cleanly, even in the middle of a streamed reply."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from serve_process import Server

pytestmark = pytest.mark.model


def test_sigterm_mid_stream_shuts_down_cleanly(tmp_path: Path) -> None:
    server = Server(tmp_path / "home")
    chunks: list[Any] = []
    outcome: list[BaseException | None] = []
    started = threading.Event()

    def stream() -> None:
        try:
            for chunk in server.client().chat.completions.create(
                model="samchat",
                messages=[{"role": "user", "content": "Write a long story about the sea."}],
                max_tokens=1500,
                stream=True,
            ):
                chunks.append(chunk)
                started.set()
            outcome.append(None)
        except Exception as exc:  # the stream ends with an error event: expected here
            outcome.append(exc)
        finally:
            started.set()

    client = threading.Thread(target=stream)
    client.start()
    assert started.wait(300), server.stderr()
    t0 = time.monotonic()
    assert server.stop() == 0, server.stderr()
    assert time.monotonic() - t0 < 30  # the reply was cancelled, not waited for
    client.join(30)
    assert not client.is_alive()
    log = server.stderr()
    assert "Traceback" not in log, log
    assert ", cancelled]" in log and "Finished server process" in log
