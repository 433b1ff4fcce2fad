"""`samchat bench perplexity`: llama.cpp and the flat engine (int4) read the same GGUF's
quantized numbers, so their perplexities on a real text agree within 1% (llama.cpp with the F16
cache its own perplexity keeps); bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samchat.bench.perplexity import parse_setups
from samchat.cli import main
from samchat.errors import SamchatError

pytestmark = pytest.mark.model
LICENSE = Path(__file__).resolve().parents[2] / "LICENSE"


def test_llamacpp_and_int4_agree_on_a_real_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "license.txt"
    text.write_text(LICENSE.read_text(encoding="utf-8")[:3000], encoding="utf-8")
    out = tmp_path / "ppl.json"
    args = ["bench", "perplexity", "--text", str(text), "--window", "256"]
    assert main([*args, "--json", str(out)]) == 0  # llamacpp,flat/int4 by default
    methods = json.loads(out.read_text())["methods"]
    assert set(methods) == {"llamacpp", "flat/int4"}
    llama, int4 = methods["llamacpp"], methods["flat/int4"]
    # Windows of 256 tokens, each read from an empty cache: each one's first token is not
    # predicted, and the difference gets its noise from the windows' paired differences.
    windows = llama["windows"]
    assert windows == int4["windows"] >= 3
    assert llama["tokens"] == int4["tokens"] > 500
    assert llama["noise"] is None and 0 < int4["noise"] < 0.05
    assert f"± {int4['noise']:.2%}" in capsys.readouterr().out
    assert 1.0 < llama["perplexity"] < 100.0
    # A text is read as a long prompt: llama.cpp's F16 cache, as its own perplexity keeps.
    assert "F16 cache" in llama["engine"], llama["engine"]
    assert abs(int4["perplexity"] / llama["perplexity"] - 1) < 0.01


def test_bad_requests_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse_setups("llamacpp, torch/int4,flat/int4,flat") == ["llamacpp", "flat/int4"]
    assert parse_setups("flat/int8,torch/float32") == ["flat/int8", "torch/float32"]
    for bad in ("gpt", "llamacpp/int4", "torch/int3", "flat/float32", ","):
        with pytest.raises(SamchatError):
            parse_setups(bad)
    assert main(["bench", "perplexity", "--text", str(tmp_path / "missing.txt")]) == 1
    err = capsys.readouterr().err.strip()
    assert "cannot read --text" in err and "\n" not in err
    text = tmp_path / "t.txt"
    text.write_text("Some text to read.", encoding="utf-8")
    for window, why in (("1", "needs 2 tokens or more"), ("100000", "longer than the model's")):
        assert main(["bench", "perplexity", "--text", str(text), "--window", window]) == 1
        err = capsys.readouterr().err.strip()  # progress lines, then the error
        assert why in err.splitlines()[-1] and "Traceback" not in err, err
