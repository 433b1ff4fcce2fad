"""`samchat ask` with a model on a real server: samchat serve (greedy replies equal to the same
model run here) and llama-cpp-python's own server; history, search, -c, stdin, -f, --docs,
--json, export and `samchat models`, all as for a local model."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest

from samchat.cli import main
from samchat.store import Store
from tests.remote.conftest import ALIAS, KEY, LlamaServer, write_config
from tests.serve.serve_process import Server

pytestmark = pytest.mark.model

QUESTION = "Name three colours of the rainbow."
GREEDY = ["--temperature", "0", "--max-new-tokens", "16"]


def db() -> Store:
    return Store.open(Path(os.environ["SAMCHAT_DATA_DIR"]) / "samchat.db")


def ask_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main([*args, "--json"]) == 0, capsys.readouterr().err
    answer: dict[str, Any] = json.loads(capsys.readouterr().out)
    return answer


def test_samchat_serve_answers_as_the_model_run_here_and_the_chat_is_kept(
    samchat_server: Server,
    key: str,
    gguf_lm: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import samchat.models

    remote = ["--model", f"openai:{samchat_server.base_url}", "ask"]
    answer = ask_json(capsys, *remote, QUESTION, *GREEDY)
    # The same GGUF on the same engine here, greedy: the same words (the server drafts
    # losslessly, so drafting there changes nothing either).
    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: gguf_lm)
    local = ask_json(capsys, "ask", QUESTION, *GREEDY, "--no-save")
    assert answer["text"] == local["text"] != ""
    stats = answer["stats"]
    assert stats["method"] == "remote" and answer["finish_reason"] == "length"
    assert stats["tokens"] == 16 and stats["ttft_s"] > 0 and stats["tokens_per_s"] > 0
    assert answer["provenance"] == {} and stats["accepted_by_drafter"] == {}

    # -c continues it: the server is sent the chat so far.
    follow = ask_json(capsys, *remote, "-c", "And two more?", *GREEDY)
    assert follow["chat_id"] == answer["chat_id"]
    with db() as store:
        chat = store.chat(answer["chat_id"])
        assert chat.model == "SmolLM2-135M-Instruct"
        thread = store.thread(chat.id)
        assert [m.content for m in thread] == [
            QUESTION,
            answer["text"],
            "And two more?",
            follow["text"],
        ]
        assert (
            thread[1].stats is not None
            and thread[1].stats.reply.method == "remote"
            and thread[1].finish_reason == "length"
        )
        word = max(answer["text"].split(), key=len).strip(".,:;!?*")
        hits = store.search(word, kinds=("message",))
        assert answer["reply_id"] in {h.id for h in hits}

    # Export holds the remote reply like any other.
    assert main(["export", str(answer["chat_id"]), "--format", "json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert answer["text"] in json.dumps(exported)

    # --stats says what a remote reply has: tokens/s and time to first token, no speedup.
    assert main([*remote, "Say hi", "--max-new-tokens", "4", "--no-save", "--stats"]) == 0
    err = capsys.readouterr().err
    assert "first token after" in err and ", remote, " in err and "MAT" not in err


def test_stdin_files_and_documents_reach_the_server(
    samchat_server: Server,
    key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    remote = ["--model", f"openai:{samchat_server.base_url}", "ask"]
    monkeypatch.setattr("sys.stdin", io.StringIO("What is the capital of France?"))
    from_stdin = ask_json(capsys, *remote, "-", *GREEDY)
    with db() as store:
        assert store.message(from_stdin["question_id"]).content == "What is the capital of France?"

    note = tmp_path / "note.txt"
    note.write_text("The launch code word is PERIWINKLE.\n")
    attached = ask_json(capsys, *remote, "What is the code word?", "-f", str(note), *GREEDY)
    assert [Path(s["path"]).name for s in attached["sources"]] == ["note.txt"]
    with db() as store:
        assert "PERIWINKLE" in store.message(attached["question_id"]).content

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "otters.md").write_text("# Otters\n\nSea otters hold hands while they sleep.\n")
    assert main(["import", str(docs)]) == 0
    capsys.readouterr()
    answered = ask_json(capsys, *remote, "Why do sea otters hold hands?", "--docs", *GREEDY)
    assert [Path(s["path"]).name for s in answered["sources"]] == ["otters.md"]
    with db() as store:
        assert "hold hands while they sleep" in store.message(answered["question_id"]).content


def test_llama_cpp_python_server_answers_and_models_lists_it(
    llama_server: LlamaServer,
    samchat_server: Server,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Its only model is picked without a name, and can be named after '#'.
    for source in (f"openai:{llama_server.base_url}", f"openai:{llama_server.base_url}#{ALIAS}"):
        answer = ask_json(capsys, "--model", source, "ask", "Say hi", *GREEDY)
        assert answer["text"].strip() and answer["finish_reason"] in ("length", "stop")
        assert answer["stats"]["method"] == "remote" and answer["stats"]["tokens"] >= 1
        with db() as store:
            assert store.chat(answer["chat_id"]).model == ALIAS

    # `samchat models` lists what configured endpoints serve; one that is down is one line.
    monkeypatch.setenv("TEAM_KEY", KEY)
    write_config(
        f'[endpoints.llama]\nurl = "{llama_server.base_url}"\n\n'
        f'[endpoints.team]\nurl = "{samchat_server.base_url}"\napi_key_env = "TEAM_KEY"\n\n'
        '[endpoints.gone]\nurl = "http://127.0.0.1:9/v1"\n'
    )
    assert main(["models", "--json"]) == 0
    captured = capsys.readouterr()
    listed = {e["source"]: e for e in json.loads(captured.out)}
    assert listed[f"openai:llama#{ALIAS}"]["origin"] == "endpoint llama"
    assert listed["openai:team#SmolLM2-135M-Instruct"]["format"] == "remote"
    assert captured.err.strip() == (
        "[gone refused the connection; is the server running on 127.0.0.1:9?]"
    )
    # A configured endpoint is named by its name; its key comes from its variable.
    named = ask_json(capsys, "--model", "openai:team", "ask", "Say hi", *GREEDY, "--no-save")
    assert named["text"].strip()
