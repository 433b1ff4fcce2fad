"""`samchat bench perplexity`: llama.cpp and the flat engine (int4) read the same GGUF's
quantized numbers, so their perplexities on a real text agree within 1%; bad input is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samchat.bench.perplexity import parse_setups
from samchat.cli import main
from samchat.errors import SamchatError

pytestmark = pytest.mark.model
LICENSE = Path(__file__).resolve().parents[2] / "LICENSE"


def test_llamacpp_and_int4_agree_on_a_real_text(tmp_path: Path) -> None:
    text = tmp_path / "license.txt"
    text.write_text(LICENSE.read_text(encoding="utf-8")[:2000], encoding="utf-8")
    out = tmp_path / "ppl.json"
    args = ["bench", "perplexity", "--text", str(text)]  # llamacpp,flat/int4 by default
    assert main([*args, "--json", str(out)]) == 0
    methods = json.loads(out.read_text())["methods"]
    assert set(methods) == {"llamacpp", "flat/int4"}
    llama, int4 = methods["llamacpp"], methods["flat/int4"]
    assert llama["tokens"] == int4["tokens"] > 300
    assert 1.0 < llama["perplexity"] < 100.0
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
