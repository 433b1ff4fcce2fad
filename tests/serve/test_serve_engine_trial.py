"""A real `samchat serve` on a GGUF file with no engine record (the bundled model copied
elsewhere), asked through the `openai` client: it says the engine is not measured yet, measures
the engines between requests after the first completion and keeps the record, which the next
start takes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from samchat.models.engine_choice import STEPS_ENV, kept
from samchat.models.loader import ModelSpec
from tests.serve.serve_process import Server

pytestmark = pytest.mark.model

MESSAGES = [{"role": "user", "content": "Repeat after me: the quick brown fox."}]


def test_serve_measures_the_engines_after_the_first_completion(
    tmp_path: Path, unmeasured_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STEPS_ENV, "2")
    spec, cache = ModelSpec(source=str(unmeasured_gguf)), tmp_path / "cache"
    server = Server(tmp_path, "--model", str(unmeasured_gguf))
    try:
        assert "[engine llamacpp: not measured yet: measuring after the first answer]" in (
            server.stderr()
        )
        client = server.client()
        first = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
        assert first.choices[0].message.content
        deadline = time.monotonic() + 300
        while kept(cache, spec) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        speeds = kept(cache, spec)
        assert speeds is not None and [s.label for s in speeds] == ["llamacpp", "flat/int4"]
        best = min(speeds, key=lambda s: s.ms_per_token)
        deadline = time.monotonic() + 60
        while "measured fastest here" not in server.stderr() and time.monotonic() < deadline:
            time.sleep(0.2)
        log = server.stderr()
        assert f"measured fastest here: {best.label} " in log, log
        # Switched between requests where the faster engine differs (same model, same limit).
        now = "stays" if best.engine == "llamacpp" else "replies now run on"
        assert f"[{best.engine} {now}" in log or f"[{now} {best.engine}" in log, log
        second = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
        assert second.choices[0].message.content
    finally:
        assert server.stop() == 0, server.stderr()
    # The next start takes the record.
    again = Server(tmp_path, "--model", str(unmeasured_gguf))
    try:
        assert f"[engine {best.engine}: measured fastest here: {best.label} " in again.stderr()
    finally:
        assert again.stop() == 0, again.stderr()
