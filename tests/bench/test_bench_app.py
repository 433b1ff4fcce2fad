"""`samchat bench app` end to end: the real app (headless) and `samchat ask` in its own process
answer the same questions, alternating; both replies are the same text, and the app's last
live figures are what its engine measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.model


def test_the_app_and_ask_answer_alike_and_the_live_figures_hold(tmp_path: Path) -> None:
    out = tmp_path / "app.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "samchat",
            "bench",
            "app",
            "--question",
            "Count from one to twenty in words, separated by commas.",
            "--methods",
            "plain,sam+tr",
            "--max-new-tokens",
            "48",
            "--rounds",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "| plain |" in done.stdout and "| sam+tr |" in done.stdout
    data = json.loads(out.read_text(encoding="utf-8"))
    runs = data["runs"]
    # The question through both front ends, with both methods.
    assert sorted((r["front"], r["method"]) for r in runs) == [
        ("app", "plain"),
        ("app", "sam+tr"),
        ("cli", "plain"),
        ("cli", "sam+tr"),
    ]
    assert len({r["text_sha"] for r in runs}) == 1  # one greedy reply, whoever decodes it
    for row in data["summary"]:
        assert row["identical_replies"] == "1/1"
        assert row["app_tok_s"] > 0 and row["cli_tok_s"] > 0
        # One reply each: the median is that reply's figure, as the mean is.
        assert row["app_tok_s_median"] == row["app_tok_s"]
        assert row["app_over_cli_median"] == row["app_over_cli"]
    for run in runs:
        assert run["tokens"] > 1 and run["tokens_per_s"] > 0
        if run["front"] == "app":
            assert run["shown_tokens_per_s"] > 0  # the bar showed live figures before the end
