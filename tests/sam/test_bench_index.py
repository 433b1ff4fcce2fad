"""`samchat bench index` runs end to end on a small corpus and writes every documented key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samchat.cli import main

KEYS = (
    "build_tokens_per_s",
    "bytes_per_token_disk",
    "bytes_per_token_memory",
    "match_us",
    "draft_us",
    "load_s_10m",
)


def test_bench_index_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r" / "index.json"
    argv = ["bench", "index", "--tokens", "3000", "--load-tokens", "4000"]
    argv += ["--baseline-tokens", "2000", "--pure-tokens", "1000", "--corpus", "words"]
    assert main([*argv, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in KEYS:
        assert res[key] > 0, key
        assert res["baseline_" + key] > 0, key
    assert res["pure_build_tokens_per_s"] > 0 and res["pure_match_us"] > 0
    assert res["tokens"] == 3000 and res["load_tokens"] == 4000
    # Packed arrays: far below the dict-per-state automaton in memory.
    assert res["bytes_per_token_memory"] < res["baseline_bytes_per_token_memory"] / 4
    assert "bytes/token on disk" in capsys.readouterr().out


def test_bench_index_rejects_tiny_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "index", "--tokens", "10"]) == 1
    assert "error: --tokens must be at least 1000" in capsys.readouterr().err
