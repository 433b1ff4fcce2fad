"""`samchat serve --engine torch`: the same greedy replies as `samchat ask` on that engine,
streamed or not (the default engine, llama.cpp, is covered in test_serve_api.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from serve_process import Server, ask, streamed

pytestmark = pytest.mark.model

PROMPT = "Give one tip for sleeping well."


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, default_lm: object) -> Iterator[Server]:
    """default_lm has the run's torch cost curve measured: the server reads it rather than
    timing the machine again before it listens."""
    running = Server(tmp_path_factory.mktemp("serve-torch"), "--engine", "torch")
    yield running
    assert running.stop() == 0, running.stderr()


def test_torch_replies_equal_ask_on_torch(server: Server) -> None:
    messages = [{"role": "user", "content": PROMPT}]
    client = server.client()
    plain = client.chat.completions.create(model="default", messages=messages, max_tokens=24)  # type: ignore[arg-type]
    text, _ = streamed(client, model="default", messages=messages, max_tokens=24)
    # What the server measured here (--dtype auto's verdict, cost curves) holds for ask too.
    shutil.copytree(server.home / "cache", server.home / "ask" / "cache", dirs_exist_ok=True)
    asked = ask(server.home / "ask", PROMPT, "--engine", "torch", "--max-new-tokens", "24")
    assert plain.choices[0].message.content == text == asked != ""
    assert "with llama.cpp" not in server.stderr()
