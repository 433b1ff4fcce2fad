"""Every fault of a remote server, each against a real socket: one line that says what to do,
a partial reply kept and marked, a cancel that does not wait for a silent server, and no
stored chat harmed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from samchat.chat.service import ChatService, ReplyRecord, stream_reply
from samchat.cli import main
from samchat.decoding.events import ReplyDone, TextDelta
from samchat.decoding.params import SamplingParams
from samchat.remote.client import RemoteError, RemoteModel, connect
from samchat.remote.endpoint import Endpoint, parse_source
from samchat.remote.replies import RemoteGenerator
from samchat.store import Store
from tests.remote.conftest import KEY, LlamaServer, write_config
from tests.remote.fake_servers import (
    MODEL,
    closed_port,
    html_server,
    scripted_server,
    silent_port,
    stalling_server,
)
from tests.serve.serve_process import Server
from tests.terminal import as_from_a_terminal

LONG = SamplingParams(max_new_tokens=400, temperature=0.0)
COUNT = [{"role": "user", "content": "Count from 1 to 300, one number per line."}]


def data_db() -> Path:
    return Path(os.environ["SAMCHAT_DATA_DIR"]) / "samchat.db"


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The error `samchat ask` prints for `argv`, checked to be one line and no traceback."""
    assert main([*argv]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and not any("Traceback" in line for line in err), err
    return errors[0]


@pytest.fixture
def kept_chat() -> Iterator[tuple[int, list[str]]]:
    """A stored chat that every failed ask continues (-c): it must come out unchanged."""
    with Store.open(data_db()) as store:
        chat_id = store.create_chat("kept", "m")
        question = store.add_message(chat_id, "user", "hello", None)
        store.add_message(chat_id, "assistant", "hi there", question)
    yield chat_id, ["hello", "hi there"]
    with Store.open(data_db()) as store:
        assert [m.content for m in store.thread(chat_id)] == ["hello", "hi there"]
        assert len(store.chats()) == 1


def _refused() -> str:
    return f"openai:http://127.0.0.1:{closed_port()}/v1"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (_refused, "refused the connection; is the server running on 127.0.0.1:"),
        (lambda: "openai:http://no-such-host.invalid/v1", "cannot find the host"),
        (lambda: "openai:nowhere", "nor a configured endpoint"),
    ],
    ids=["refused", "dns", "unknown-endpoint"],
)
def test_unreachable_servers(
    source: Callable[[], str],
    expected: str,
    kept_chat: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = one_line_error(capsys, "--model", source(), "ask", "-c", "Are you there?")
    assert expected in line


def test_a_silent_server_times_out(kept_chat: Any, capsys: pytest.CaptureFixture[str]) -> None:
    with silent_port() as port:
        write_config(f'[endpoints.slow]\nurl = "http://127.0.0.1:{port}/v1"\ntimeout = 1\n')
        line = one_line_error(capsys, "--model", "openai:slow", "ask", "-c", "Still there?")
    assert "slow did not answer within 1 s" in line and "raise timeout" in line


def test_not_an_openai_server_and_tls_against_plain_http(
    kept_chat: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with html_server() as where:
        line = one_line_error(capsys, "--model", f"openai:http://{where}/v1", "ask", "-c", "hi")
        assert "did not answer as an OpenAI-compatible server does; check the URL" in line
        line = one_line_error(capsys, "--model", f"openai:https://{where}/v1", "ask", "-c", "hi")
        assert line.startswith(f"error: TLS failed with https://{where}/v1")


@pytest.mark.model
def test_a_wrong_key_and_an_unknown_model(
    samchat_server: Server,
    kept_chat: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = samchat_server.base_url
    monkeypatch.setenv("SAMCHAT_API_KEY", "sk-wrong")
    line = one_line_error(capsys, "--model", f"openai:{url}", "ask", "-c", "hi")
    assert "refused the API key (401)" in line and "$SAMCHAT_API_KEY" in line
    monkeypatch.delenv("SAMCHAT_API_KEY")
    write_config(f'[endpoints.team]\nurl = "{url}"\napi_key_env = "TEAM_KEY"\n')
    line = one_line_error(capsys, "--model", "openai:team", "ask", "-c", "hi")
    assert "reads its API key from $TEAM_KEY, which is not set" in line
    monkeypatch.setenv("TEAM_KEY", KEY)
    line = one_line_error(capsys, "--model", "openai:team#gpt-9", "ask", "-c", "hi")
    assert "team has no model 'gpt-9'; it serves: SmolLM2-135M-Instruct" in line


def test_a_cancel_does_not_wait_for_a_silent_server() -> None:
    """The server sends two words and then nothing: a cancel ends the reply at once (the
    connection is dropped), with the words kept."""
    with stalling_server() as where:
        endpoint = Endpoint(f"http://{where}/v1", timeout_s=60)
        generator = RemoteGenerator(RemoteModel(endpoint, MODEL))
        cancel = threading.Event()
        events = generator.generate([{"role": "user", "content": "hi"}], SamplingParams(), cancel)
        texts = [next(events), next(events)]
        assert [e.text for e in texts if isinstance(e, TextDelta)] == ["Hello", " there"]
        timer = threading.Timer(0.3, cancel.set)
        started = time.perf_counter()
        timer.start()
        done = next(events)
        assert isinstance(done, ReplyDone)
        assert time.perf_counter() - started < 5  # not the 60 s the read would wait
        assert (done.text, done.finish_reason) == ("Hello there", "cancelled")
        assert list(events) == []


def test_ctrl_c_in_ask_stops_a_stalled_reply(tmp_path: Path) -> None:
    with stalling_server() as where:
        proc = subprocess.Popen(
            [sys.executable, "-m", "samchat", "--model", f"openai:http://{where}/v1",
             "ask", "hi"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            preexec_fn=as_from_a_terminal,
        )  # fmt: skip
        assert proc.stdout is not None
        assert proc.stdout.read(5) == "Hello"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("[cancelled: the partial reply is saved")
    with Store.open(data_db()) as store:  # the question, and the words that came, kept
        (chat,) = store.chats()
        question, reply = store.thread(chat.id)
    assert question.content == "hi" and reply.content.startswith("Hello")
    assert reply.finish_reason == "cancelled"


@pytest.mark.model
def test_cancel_mid_reply_keeps_the_partial_reply(samchat_server: Server, key: str) -> None:
    lm = connect(parse_source(f"openai:{samchat_server.base_url}", {}), lambda _: None)
    with Store.open(data_db()) as store:
        service = ChatService(store)
        pending = service.send(COUNT[0]["content"], chat_id=None, parent_id=None, model=lm.name)
        cancel = threading.Event()
        record = None
        for event in stream_reply(RemoteGenerator(lm), pending, LONG, cancel):
            if isinstance(event, TextDelta):
                cancel.set()
            if isinstance(event, ReplyRecord):
                record = event
        assert record is not None and record.finish_reason == "cancelled"
        assert 0 < record.stats.reply.tokens < 400
        reply_id = service.finish(pending, record)
        assert reply_id is not None
        stored = store.message(reply_id)
        assert stored.content == record.text != "" and stored.finish_reason == "cancelled"


@pytest.mark.model
def test_a_server_killed_mid_stream_leaves_the_partial_reply_kept_and_marked(
    tmp_path: Path,
) -> None:
    server = LlamaServer(tmp_path / "doomed")
    try:
        lm = connect(parse_source(f"openai:{server.base_url}", {}), lambda _: None)
        with Store.open(data_db()) as store:
            service = ChatService(store)
            pending = service.send(COUNT[0]["content"], chat_id=None, parent_id=None, model="m")
            record = None
            for event in stream_reply(RemoteGenerator(lm), pending, LONG, threading.Event()):
                if isinstance(event, TextDelta):
                    server.kill()  # while the server is still streaming
                if isinstance(event, ReplyRecord):
                    record = event
            assert record is not None and record.finish_reason == "interrupted"
            assert record.text.strip() and "the partial reply is kept" in record.notice
            reply_id = service.finish(pending, record)
            assert reply_id is not None
            stored = store.message(reply_id)
            assert stored.content == record.text and stored.finish_reason == "interrupted"
            assert stored.stats is not None and stored.stats.notice == record.notice
    finally:
        server.kill()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("html", "did not answer as an OpenAI-compatible server does; check the URL"),
        ("json", "did not answer as an OpenAI-compatible server does; check the URL"),
        ("forbidden", "denied access (403): this key may not use the model; check the key"),
    ],
)
def test_a_chat_reply_that_is_not_a_stream_is_one_line(
    mode: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model list is fine; the reply is a login page, a plain JSON body, or a 403. The
    question stays saved without a reply, as when a local model fails mid-reply."""
    with scripted_server(mode, []) as where:
        line = one_line_error(capsys, "--model", f"openai:http://{where}/v1", "ask", "hi")
    assert expected in line
    with Store.open(data_db()) as store:
        [chat] = store.chats()
        assert [(m.role, m.content) for m in store.thread(chat.id)] == [("user", "hi")]


def test_a_long_chat_drops_its_oldest_turns_and_says_so() -> None:
    requests: list[dict[str, Any]] = []
    with scripted_server("sse", requests) as where:
        lm = RemoteModel(Endpoint(f"http://{where}/v1", context=300), MODEL)
        history = [{"role": "system", "content": "Be brief."}]
        for i in range(6):  # about 6 x 2 x 40 estimated tokens: more than 300 - 64
            history += [
                {"role": "user", "content": f"question {i} " + "words " * 20},
                {"role": "assistant", "content": f"answer {i} " + "words " * 20},
            ]
        history.append({"role": "user", "content": "the last question"})
        sampling = SamplingParams(max_new_tokens=64, stop=("a", "b"))
        *_, done = RemoteGenerator(lm).generate(history, sampling, threading.Event())
        assert isinstance(done, ReplyDone) and (done.text, done.finish_reason) == ("ok", "stop")
        assert done.notice.startswith("dropped the ") and "oldest message(s)" in done.notice
        (sent,) = requests
        kept = sent["messages"]
        assert kept[0] == history[0] and kept[-1] == history[-1]  # the system prompt stays
        assert kept[1]["role"] == "user" and len(kept) < len(history)
        assert sent["stop"] == ["a", "b"] and sent["max_tokens"] == 64
        with pytest.raises(RemoteError, match="at most 4 stop strings and 5 are set"):
            list(
                RemoteGenerator(lm).generate(
                    history, SamplingParams(stop=tuple("abcde")), threading.Event()
                )
            )
        alone = [{"role": "user", "content": "x " * 2000}]
        with pytest.raises(RemoteError, match=r"too long for .* context"):
            list(RemoteGenerator(lm).generate(alone, SamplingParams(), threading.Event()))
