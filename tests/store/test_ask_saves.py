"""`samchat ask` saves each question and reply (--chat and -c continue, --no-save opts out),
grows the static index, honours config.toml and prints --json. Real default model, greedy, a
few tokens."""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from samchat.cli import main
from samchat.corpus.indexing import IndexManager, tokenizer_codec
from samchat.store import Store


@pytest.mark.model
def test_ask_saves_continues_and_indexes(
    default_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    import samchat.models

    monkeypatch.setattr(samchat.models, "load_model", lambda *a, **k: default_lm)
    base = ["--max-new-tokens", "4", "--method", "plain", "--data-dir", str(tmp_path)]
    assert main(["ask", "Name a colour.", "--system", "Be brief.", *base]) == 0
    assert "[saved as chat 1]" in capsys.readouterr().err
    assert main(["ask", "Another one.", "--chat", "1", *base]) == 0
    assert main(["ask", "Not kept.", "--no-save", *base]) == 0
    assert main(["ask", "Not kept either.", "--chat", "1", "--no-save", *base]) == 0
    capsys.readouterr()
    with Store.open(tmp_path / "samchat.db") as store:
        [chat] = store.chats()
        assert chat.system_prompt == "Be brief." and chat.model == default_lm.name
        thread = store.thread(chat.id)
        assert [m.role for m in thread] == ["user", "assistant", "user", "assistant"]
        assert [thread[0].content, thread[2].content] == ["Name a colour.", "Another one."]
        reply = thread[1]
        assert reply.stats is not None and 1 <= reply.stats.reply.tokens <= 4
        assert (
            reply.finish_reason in ("eos", "length")
            and reply.stats is not None
            and reply.stats.reply.steps >= 1
        )
        # The finished turns are in the static index of the model's tokenizer.
        encode, sep = tokenizer_codec(default_lm.tokenizer)
        manager = IndexManager(store, default_lm.fingerprint, encode, sep)
        assert manager.open().added == 0
        assert manager.index.document_ids() == {f"msg:{m.id}" for m in thread}
        manager.close()
    with pytest.raises(SystemExit):
        main(["ask", "x", "--chat", "notanumber", *base])
    assert main(["ask", "x", "--chat", "99", *base]) == 1
    assert "there is no chat 99" in capsys.readouterr().err


def _load_into(default_lm: Any, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """load_model stand-in: records each ModelSpec asked for and gives the loaded default."""
    import samchat.models

    specs: list[Any] = []

    def load(spec: Any, **_: Any) -> Any:
        specs.append(spec)
        return default_lm

    monkeypatch.setattr(samchat.models, "load_model", load)
    return specs


def _write_config(text: str) -> None:
    path = Path(os.environ["SAMCHAT_CONFIG_DIR"]) / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.model
def test_ask_honours_config_toml_and_options_override_it(
    default_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    specs = _load_into(default_lm, monkeypatch)
    _write_config(
        'model = "from-config"\ndevice = "cpu"\nengine = "torch"\n'
        '[decoding]\nmethod = "plain"\n[sampling]\nmax_new_tokens = 3\ntemperature = 0.0\n'
    )
    data = ["--data-dir", str(tmp_path)]
    assert main(["ask", "--json", "Count to ten.", *data]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (specs[-1].source, specs[-1].device, specs[-1].engine) == ("from-config", "cpu", "torch")
    assert first["stats"]["method"] == "plain" and first["stats"]["tokens"] <= 3
    # Each option given wins over the file; -m is --model.
    args = ["-m", "from-option", "--method", "sam", "--max-new-tokens", "5"]
    assert main(["ask", "--json", *args, "Count to ten.", *data]) == 0
    second = json.loads(capsys.readouterr().out)
    assert specs[-1].source == "from-option" and specs[-1].device == "cpu"
    assert second["stats"]["method"] == "sam" and 3 < second["stats"]["tokens"] <= 5


@pytest.mark.model
def test_ask_continue_and_json(
    default_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    _load_into(default_lm, monkeypatch)
    base = ["--max-new-tokens", "6", "--temperature", "0", "--json", "--data-dir", str(tmp_path)]
    assert main(["ask", "Name a colour.", *base]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["ask", "Other chat.", *base]) == 0
    other = json.loads(capsys.readouterr().out)
    # -c continues the most recent chat: the question is its next turn, its history the context.
    assert main(["ask", "-c", "And another?", *base]) == 0
    cont = json.loads(capsys.readouterr().out)
    assert set(cont) == {
        "chat_id", "question_id", "reply_id", "text", "finish_reason", "stats", "provenance",
        "sources",
    }  # fmt: skip
    assert cont["chat_id"] == other["chat_id"] != first["chat_id"]
    assert (
        cont["stats"]["prompt_tokens"] > other["stats"]["prompt_tokens"] + other["stats"]["tokens"]
    )
    with Store.open(tmp_path / "samchat.db") as store:
        thread = store.thread(cont["chat_id"])
        assert [m.id for m in thread] == [
            other["question_id"], other["reply_id"], cont["question_id"], cont["reply_id"],
        ]  # fmt: skip
        reply = thread[-1]
        assert reply.content == cont["text"] and reply.finish_reason == cont["finish_reason"]
        assert reply.stats is not None and reply.stats.to_dict() == cont["stats"]
    # The provenance summary: the reply's characters by drafter.
    assert sum(cont["provenance"].values()) == len(cont["text"])
    assert cont["provenance"] == {
        s: sum(n for n, d in cont["stats"]["provenance"] if d == s)
        for _, s in cont["stats"]["provenance"]
    }
    assert main(["ask", "Not kept.", "--no-save", *base]) == 0
    unsaved = json.loads(capsys.readouterr().out)
    assert (unsaved["chat_id"], unsaved["question_id"], unsaved["reply_id"]) == (None, None, None)


@pytest.mark.parametrize(
    ("args", "config", "fragment"),
    [
        (["-c", "hi"], "", "there is no chat to continue yet"),
        (["hi"], "[sampling]\ntemperature = -1\n", "temperature"),
        (["hi"], "device = 3\n", "device must be a string"),
    ],
)
def test_ask_bad_input_is_one_line(
    args: list[str], config: str, fragment: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    if config:
        _write_config(config)
    assert main(["ask", *args, "--data-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    [line] = err.strip().splitlines()
    assert line.startswith("error: ") and fragment in line and "Traceback" not in err


def test_continue_and_chat_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["ask", "-c", "--chat", "1", "hi"])
    assert exit_.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


@pytest.mark.model
def test_ask_says_it_reads_a_long_prompt(
    gguf_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """A prompt of several prefill pieces: one line on stderr says how many tokens are read
    before the answer starts (stderr is no terminal here: no line rewritten in place); a short
    prompt, read in one piece, says nothing."""
    from tests.decoding.prompts import LONG_CONTEXT

    _load_into(gguf_lm, monkeypatch)
    base = ["--max-new-tokens", "4", "--no-save", "--data-dir", str(tmp_path)]
    text = "\n\n".join(LONG_CONTEXT) + "\n\nSummarise the text above."
    assert main(["ask", text, *base]) == 0
    out = capsys.readouterr()
    said = [line for line in out.err.splitlines() if line.startswith("[reading ")]
    assert len(said) == 1 and re.fullmatch(r"\[reading [\d,]{3,} tokens of the prompt…\]", said[0])
    assert out.out.strip()
    assert main(["ask", "Name a colour.", *base]) == 0
    assert "[reading" not in capsys.readouterr().err


def test_reading_on_a_terminal_is_one_line_rewritten_then_cleared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from samchat.commands.ask import _Reading

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    reading = _Reading()
    for done in (0, 512, 1024):
        reading.update(done, 1528)
    reading.end()
    reading.end()  # once only
    assert err.getvalue() == (
        "\r[reading 1,528 tokens of the prompt… 0%]"
        "\r[reading 1,528 tokens of the prompt… 33%]"
        "\r[reading 1,528 tokens of the prompt… 67%]"
        "\r\033[K"
    )
