"""`samchat serve` on the default engine (llama.cpp for the bundled GGUF), with an API key and
--save, driven by the real `openai` package: replies, KV reuse, queueing, errors, disconnects."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from serve_process import Server, ask, streamed

from samchat.serve.protocol import MAX_BODY_BYTES, MAX_MESSAGES
from samchat.store import Store
from samchat.store.store import DB_NAME

pytestmark = pytest.mark.model

KEY = "sk-samchat-test"
MODEL = "SmolLM2-135M-Instruct"
QUESTION = [
    {"role": "system", "content": "You are a terse assistant."},
    {"role": "user", "content": "Name three colours of the rainbow."},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("serve-api"), "--save", api_key=KEY)
    yield running
    assert running.stop() == 0, running.stderr()


def reply(client: openai.OpenAI, messages: list[dict[str, str]], **extra: Any) -> Any:
    return client.chat.completions.create(model=MODEL, messages=messages, **extra)  # type: ignore[arg-type]


def test_models_lists_the_loaded_model(server: Server) -> None:
    models = server.client().models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert server.client().models.retrieve(MODEL.lower()).id == MODEL


def test_streamed_and_plain_greedy_replies_equal_each_other_and_ask(server: Server) -> None:
    client = server.client()
    plain = reply(client, QUESTION, max_tokens=24, temperature=0)
    text, chunks = streamed(client, model="samchat", messages=QUESTION, max_tokens=24)
    assert plain.choices[0].message.content == text != ""
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason == "length"
    figures = chunks[-1].model_extra["samchat"]
    assert figures["tokens"] == plain.usage.completion_tokens == 24
    for name in ("tokens_per_s", "mat", "speedup_est", "accepted_by_drafter", "reused_tokens"):
        assert name in figures and name in plain.model_extra["samchat"]
    asked = ask(
        server.home / "ask", QUESTION[1]["content"], "--system", QUESTION[0]["content"],
        "--max-new-tokens", "24",
    )  # fmt: skip
    assert asked == text


def test_a_follow_up_reuses_the_kv_cache_and_continues_the_saved_chat(server: Server) -> None:
    client = server.client()
    turn = [{"role": "user", "content": "What is the capital of France?"}]
    first = reply(client, turn, max_tokens=16)
    answer = first.choices[0].message.content
    turn += [{"role": "assistant", "content": answer}, {"role": "user", "content": "And Spain?"}]
    second = reply(client, turn, max_tokens=16)
    figures = second.model_extra["samchat"]
    # The whole first prompt (and more) was in the cache: only the new turn was prefilled.
    assert figures["reused_tokens"] >= first.usage.prompt_tokens
    assert second.usage.prompt_tokens_details.cached_tokens == figures["reused_tokens"]
    # --save: both turns in one stored chat, in order.
    chat_id = figures["chat_id"]
    assert first.model_extra["samchat"]["chat_id"] == chat_id
    with Store.open(server.home / "data" / DB_NAME) as store:
        rows = [(r.role, r.content) for r in store.thread(chat_id)]
    assert rows == [
        ("user", turn[0]["content"]),
        ("assistant", answer),
        ("user", "And Spain?"),
        ("assistant", second.choices[0].message.content),
    ]


def test_two_concurrent_clients_both_get_complete_correct_replies(server: Server) -> None:
    prompts = ["Count from one to five.", "Name two planets."]
    alone = [
        reply(server.client(), [{"role": "user", "content": p}], max_tokens=20) for p in prompts
    ]
    got: dict[int, str] = {}

    def run(i: int) -> None:
        messages = [{"role": "user", "content": prompts[i]}]
        if i == 0:
            got[i] = streamed(server.client(), model=MODEL, messages=messages, max_tokens=20)[0]
        else:
            got[i] = reply(server.client(), messages, max_tokens=20).choices[0].message.content

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert got == {i: alone[i].choices[0].message.content for i in range(2)}


def _body(**fields: Any) -> bytes:
    request = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    request.update(fields)
    return json.dumps({k: v for k, v in request.items() if v is not None}).encode()


ERRORS = {
    "malformed JSON": ("POST", "/chat/completions", b'{"model": "x", "messages": [', KEY, 400),
    "not an object": ("POST", "/chat/completions", b"[1, 2]", KEY, 400),
    "missing messages": ("POST", "/chat/completions", _body(messages=None), KEY, 400),
    "missing model": ("POST", "/chat/completions", _body(model=None), KEY, 400),
    "a message without a role": (
        "POST", "/chat/completions", _body(messages=[{"content": "hi"}]), KEY, 400,
    ),
    "a role that is a list": (
        "POST", "/chat/completions", _body(messages=[{"role": ["user"], "content": "hi"}]), KEY,
        400,
    ),
    "a bad temperature": ("POST", "/chat/completions", _body(temperature=-1), KEY, 400),
    "max_tokens beyond the context": (
        "POST", "/chat/completions", _body(max_tokens=10**6), KEY, 400,
    ),
    "unknown model": ("POST", "/chat/completions", _body(model="gpt-4o"), KEY, 404),
    "unknown route": ("GET", "/nothing", None, KEY, 404),
    "no key": ("POST", "/chat/completions", _body(), None, 401),
    "wrong key": ("POST", "/chat/completions", _body(), "sk-wrong", 401),
    "body over the limit": (
        "POST", "/chat/completions",
        _body(messages=[{"role": "user", "content": "x" * MAX_BODY_BYTES}]), KEY, 413,
    ),
    "too many messages": (
        "POST", "/chat/completions",
        _body(messages=[{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1)), KEY, 413,
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", ERRORS)
def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(
    server: Server, case: str
) -> None:
    method, path, body, key, status = ERRORS[case]
    got, answer = server.request(method, path, body, auth=key)
    assert got == status, answer
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and "\n" not in error["message"]
    assert reply(server.client(), [{"role": "user", "content": "hi"}], max_tokens=2).choices


def test_the_openai_package_raises_its_own_errors(server: Server) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.AuthenticationError):
        reply(server.client(api_key="sk-wrong"), messages, max_tokens=2)
    with pytest.raises(openai.NotFoundError):
        server.client().chat.completions.create(model="gpt-4o", messages=messages)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError, match="context"):
        reply(server.client(), messages, max_tokens=10**6)


def test_a_client_leaving_mid_stream_cancels_its_reply(server: Server) -> None:
    story: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "Write a very long story about a dragon."}
    ]
    stream = server.client().chat.completions.create(
        model=MODEL, messages=story, max_tokens=1500, stream=True
    )
    for n, _ in enumerate(stream):
        if n == 2:
            break
    stream.close()
    deadline = time.monotonic() + 120
    while "cancelled]" not in server.stderr() and time.monotonic() < deadline:
        time.sleep(0.2)
    [line] = [x for x in server.stderr().splitlines() if x.endswith(", cancelled]")]
    assert int(line.split()[1]) < 1500  # "[reply: N tokens, ..." stopped early
    after = reply(server.client(), [{"role": "user", "content": "hi"}], max_tokens=4)
    assert after.choices[0].finish_reason in ("stop", "length")
