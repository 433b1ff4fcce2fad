"""`samchat bench latency`: samchat and llama-cpp-python's Llama timed side by side from process
start on the same GGUF and prompts (real processes, the bundled model, few tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samchat.bench.latency import PEER, SAMCHAT, WARM
from samchat.cli import main

pytestmark = pytest.mark.model


def test_latency_times_both_from_process_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "latency.json"
    argv = ["bench", "latency", "--repeat", "1", "--docs", "200", "--max-new-tokens", "4"]
    assert main([*argv, "--no-first-use", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| short | " in printed and "| document 0.2k | " in printed
    report = json.loads(out.read_text())
    assert report["max_new_tokens"] == 4 and report["threads"] >= 1
    rows = {(r["case"], r["tool"]): r for r in report["rows"]}
    assert set(rows) == {(c, t) for c in ("short", "document 0.2k") for t in (SAMCHAT, PEER)}
    for row in rows.values():
        assert row["start"] == WARM and row["runs"] == 1
        assert 0 < row["first_s"] <= row["total_s"]
    # The document prompt is the same for both: 200 tokens of it, then the question.
    assert 200 < rows[("document 0.2k", SAMCHAT)]["prompt_tokens"] < 240


def test_bad_options_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as usage:
        main(["bench", "latency", "--docs", "lots"])
    assert (
        usage.value.code == 2 and "'lots' is not a list of token counts" in capsys.readouterr().err
    )
    assert main(["bench", "latency", "--model", str(tmp_path / "none.gguf")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"error: {tmp_path / 'none.gguf'} is not a file; pass --model with a GGUF file"
