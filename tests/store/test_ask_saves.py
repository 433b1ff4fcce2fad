"""`samchat ask` saves each question and reply (--chat continues, --no-save opts out) and grows
the static index. Real default model, greedy, a few tokens."""

from __future__ import annotations

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
        assert reply.tokens is not None and 1 <= reply.tokens <= 4
        assert reply.finish_reason in ("eos", "length") and reply.stats["steps"] >= 1
        # The finished turns are in the static index of the model's tokenizer.
        encode, sep = tokenizer_codec(default_lm.tokenizer)
        manager = IndexManager(store, default_lm.fingerprint, encode, sep)
        assert manager.open().added == 0
        assert manager.index.document_ids() == {f"msg:{m.id}" for m in thread}
        manager.close()
    with pytest.raises(SystemExit):
        main(["ask", "x", "--chat", "notanumber", *base])
    assert main(["ask", "x", "--chat", "99", *base]) == 2
    assert "there is no chat 99" in capsys.readouterr().err
