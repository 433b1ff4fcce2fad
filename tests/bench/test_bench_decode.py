"""`samchat bench decode` end to end on a small question file with the real default model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samchat.bench.decode import load_questions, parse_methods, pick, warm_plan
from samchat.cli import main
from samchat.errors import SamchatError

QUESTIONS = [
    {
        "question_id": 1,
        "category": "writing",
        "turns": ["Write two sentences about the sea.", "Now repeat them in upper case."],
    },
    {"question_id": 2, "category": "qa", "turns": ["What is the capital of Italy?"]},
    {"question_id": 3, "category": "qa", "turns": ["Name three primary colours."]},
]


def write_questions(path: Path) -> Path:
    path.write_text("\n".join(json.dumps(q) for q in QUESTIONS) + "\n")
    return path


def test_pick_skips_warm_up_questions_per_category(tmp_path: Path) -> None:
    questions = load_questions(write_questions(tmp_path / "q.jsonl"))
    assert [q.question_id for q in pick(questions, 1)] == ["1", "2"]
    assert [q.question_id for q in pick(questions, 1, skip=1)] == ["3"]


def test_bad_inputs_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(SamchatError, match="does not exist"):
        load_questions(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question_id": 1}\n')
    with pytest.raises(SamchatError, match="not a Spec-Bench question"):
        load_questions(bad)
    with pytest.raises(SamchatError, match="unknown method"):
        parse_methods("plain,fast")
    assert parse_methods("sam+tr") == ("plain", "sam+tr")


def test_warm_plan_reruns_plain_only_when_named() -> None:
    methods = parse_methods("pld,sam+tr")
    assert warm_plan(methods, None) == (methods, True)
    assert warm_plan(methods, "sam+tr") == (("plain", "sam+tr"), False)
    assert warm_plan(methods, "sam+tr, plain") == (("plain", "sam+tr"), True)
    assert warm_plan(methods, " plain ") == (("plain",), True)
    with pytest.raises(SamchatError, match="subset"):
        warm_plan(methods, "tr")


def test_bad_command_line_values_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = write_questions(tmp_path / "q.jsonl")
    base = ["bench", "decode", "--questions", str(questions)]
    assert main([*base, "--max-draft", "-1"]) != 0
    err = capsys.readouterr().err.strip()
    assert "--max-draft must be >= 0" in err and len(err.splitlines()) == 1
    assert main([*base, "--methods", "sam", "--warm-methods", "tr"]) != 0
    assert "subset of --methods" in capsys.readouterr().err


def test_bench_decode_writes_table_json_and_chart(tmp_path: Path, default_lm: object) -> None:
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    code = main(
        [
            "bench", "decode", "--questions", str(questions), "--methods", "pld,sam+tr",
            "--per-category", "1", "--max-new-tokens", "12", "--json", str(out), "--png", str(png),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data) >= {"meta", "plain", "pld", "sam+tr"}
    for method in ("plain", "pld", "sam+tr"):
        assert set(data[method]) == {"writing", "qa", "overall"}
        overall = data[method]["overall"]
        assert overall["questions"] == 2
        assert overall["tokens_per_s"] > 0
        assert overall["mat"] >= 1.0
        # greedy decoding is lossless: every method reproduces plain decoding exactly
        assert overall["identical"] == 2
    assert data["plain"]["overall"]["speedup_vs_plain"] == 1.0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_decode_warm_up_table_reuses_plain_runs(tmp_path: Path, default_lm: object) -> None:
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench", "decode", "--questions", str(questions), "--methods", "sam+tr",
            "--per-category", "1", "--max-new-tokens", "12", "--warm-chats", "1",
            "--warm-methods", "sam+tr", "--json", str(out), "--png", str(tmp_path / "c.png"),
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    # Warm-up takes the first question of each category; the evaluated one is the next qa one.
    assert set(data["sam+tr"]) == {"qa", "overall"}
    warm = data["warm"]
    assert set(warm) == {"plain", "sam+tr"}
    assert warm["plain"] == data["plain"]  # plain reads no index: its runs are reused
    assert warm["sam+tr"]["overall"]["identical"] == 1
    assert (tmp_path / "c-warm.png").read_bytes()[:4] == b"\x89PNG"
