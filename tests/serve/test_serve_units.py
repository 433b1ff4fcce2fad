"""The server's parts that need no model: request checking and --save's chat continuation."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.decoding.events import ReplyDone, ReplyStats
from samchat.serve.history import History
from samchat.serve.protocol import ApiError, check_model, parse_chat
from samchat.store import Store

CONTEXT = 8192


def test_openai_fields_become_sampling_params() -> None:
    parts = [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": parts}]
    body = {
        "messages": messages, "max_completion_tokens": 7, "temperature": 0.5, "top_p": 0.9,
        "seed": 3, "stop": "\n", "stream": True, "stream_options": {"include_usage": True},
        "presence_penalty": 0.1,
    }  # fmt: skip
    request = parse_chat(body, CONTEXT)
    assert request.messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
    ]
    p = request.params
    assert (p.max_new_tokens, p.temperature, p.top_p, p.seed, p.stop) == (7, 0.5, 0.9, 3, ("\n",))
    assert request.stream and request.include_usage
    defaults = parse_chat({"messages": [{"role": "user", "content": "x"}]}, CONTEXT).params
    assert defaults.greedy and not defaults.stop  # the knobs' own defaults


@pytest.mark.parametrize(
    ("request_body", "status", "param"),
    [
        ({"messages": []}, 400, "messages"),
        ({"messages": [{"role": "assistant", "content": "x"}]}, 400, "messages"),
        ({"messages": [{"role": "user", "content": 3}]}, 400, "messages[0]"),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
        ({"messages": [{"role": "user", "content": "x"}], "top_p": 2}, 400, "top_p"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n"),
        (
            {"messages": [{"role": "user", "content": "x"}], "max_tokens": CONTEXT},
            400,
            "max_tokens",
        ),
        ({"messages": [{"role": "user", "content": "x"}] * 5000}, 413, "messages"),
    ],
)
def test_bad_fields_are_named(request_body: dict[str, object], status: int, param: str) -> None:
    with pytest.raises(ApiError) as caught:
        parse_chat(request_body, CONTEXT)
    assert (caught.value.status, caught.value.param) == (status, param)


def test_the_model_is_named_by_its_name_or_an_alias() -> None:
    for name in ("SmolLM2", "smollm2", "samchat", "default"):
        check_model(name, "SmolLM2")
    with pytest.raises(ApiError) as caught:
        check_model("gpt-4o", "SmolLM2")
    assert caught.value.status == 404 and caught.value.code == "model_not_found"


def _done(text: str) -> ReplyDone:
    return ReplyDone(
        text, "eos", ReplyStats(tokens=2, seconds=0.1, tokens_per_s=20.0, steps=2, mat=1.0)
    )


def test_save_continues_a_conversation_it_saved_and_starts_others(tmp_path: Path) -> None:
    db = tmp_path / "samchat.db"
    saved: list[int] = []
    history = History(db, "model", lambda: saved.append(1))
    system = {"role": "system", "content": "Be brief."}
    turn = [system, {"role": "user", "content": "Hi"}]
    first = history.save(turn, _done("Hello!"), None)
    # The client sends the reply back (trimmed) with a new question: the same chat grows.
    turn += [{"role": "assistant", "content": " Hello! "}, {"role": "user", "content": "Bye"}]
    assert history.save(turn, _done("Bye!"), None) == first
    other = history.save([{"role": "user", "content": "Hi"}], _done("Yo"), None)
    history.close()
    assert other != first and len(saved) == 3
    with Store.open(db) as store:
        assert store.chat(first).system_prompt == "Be brief."
        rows = [(r.role, r.content) for r in store.thread(first)]
    assert rows == [("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye"), ("assistant", "Bye!")]


@pytest.mark.parametrize(("flush_s", "pieces"), [(0.0, 40), (3600.0, 2)])
def test_streamed_text_is_batched_but_never_lost_or_reordered(
    monkeypatch: pytest.MonkeyPatch, flush_s: float, pieces: int
) -> None:
    """The engine thread posts the first piece at once, then what came since at most every
    STREAM_FLUSH_S (the rest at the reply's end): every token arrives, in order."""
    import asyncio
    import threading
    from collections.abc import Iterator

    from samchat.decoding.events import TextDelta
    from samchat.decoding.params import SamplingParams
    from samchat.serve import worker as worker_module
    from samchat.serve.worker import EngineWorker, Finished, Job

    monkeypatch.setattr(worker_module, "STREAM_FLUSH_S", flush_s)

    def generate(messages: object, params: object, cancel: threading.Event) -> Iterator[object]:
        for i in range(40):
            yield TextDelta(f"w{i} ", [i], ["plain"], ((f"w{i} ", "plain"),))
        yield ReplyDone("", "length", ReplyStats(40, 0.1, 400.0, 40, 1.0))

    async def receive() -> list[TextDelta]:
        engine = EngineWorker(generate).start()  # type: ignore[arg-type]
        got: list[TextDelta] = []
        try:
            job = Job([{"role": "user", "content": "x"}], SamplingParams(), stream=True)
            engine.submit(job)
            while not isinstance(item := await job.events.get(), Finished):
                assert isinstance(item, TextDelta)
                got.append(item)
        finally:
            engine.stop()
        return got

    got = asyncio.run(receive())
    assert "".join(p.text for p in got) == "".join(f"w{i} " for i in range(40))
    assert [t for p in got for t in p.token_ids] == list(range(40))
    assert [p for d in got for p in d.pieces] == [(f"w{i} ", "plain") for i in range(40)]
    assert got[0].token_ids == [0]  # the first token is never held back
    assert len(got) == pieces


def test_requests_and_idle_work_run_on_the_engine_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the process's engine thread is started (as `samchat serve` does before it loads
    the model there), every reply and the idle timing run on it, not on the worker's own
    thread: OpenMP work spread over two threads ran at a third of the speed."""
    import asyncio
    import threading
    from collections.abc import Callable, Iterator

    from samchat.decoding.params import SamplingParams
    from samchat.engines.engine_thread import EngineThread
    from samchat.serve import worker as worker_module
    from samchat.serve.worker import EngineWorker, Finished, Job

    engine_thread = EngineThread("test-engine")
    engine_thread.start()
    monkeypatch.setattr(worker_module, "ENGINE_THREAD", engine_thread)
    ran_on: list[str] = []

    def generate(messages: object, params: object, cancel: threading.Event) -> Iterator[object]:
        ran_on.append(threading.current_thread().name)
        yield ReplyDone("", "length", ReplyStats(1, 0.1, 10.0, 1, 1.0))

    def idle(wanted: Callable[[], bool]) -> None:
        ran_on.append(threading.current_thread().name)

    async def ask() -> None:
        engine = EngineWorker(generate, idle=idle).start()  # type: ignore[arg-type]
        try:
            job = Job([{"role": "user", "content": "x"}], SamplingParams(), stream=False)
            engine.submit(job)
            assert isinstance(await job.events.get(), Finished)
            while len(ran_on) < 2:
                await asyncio.sleep(0.01)
        finally:
            assert engine.stop()

    asyncio.run(ask())
    assert ran_on == ["test-engine", "test-engine"]
