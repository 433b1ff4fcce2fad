"""`samchat bench decode` end to end on a small question file with the real default model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from samchat.bench.decode import (
    default_setup,
    load_questions,
    method_order,
    parse_methods,
    pick,
    setup_spec,
    warm_plan,
)
from samchat.bench.report import Question, Results, Run, format_host, format_table, reply_cost
from samchat.cli import main
from samchat.decoding.events import HostTimes
from samchat.errors import SamchatError
from samchat.models.loader import ModelSpec

QUESTIONS = [
    {
        "question_id": 1,
        "category": "writing",
        "turns": ["Write two sentences about the sea.", "Now repeat them in upper case."],
    },
    {"question_id": 2, "category": "qa", "turns": ["What is the capital of Italy?"]},
    {"question_id": 3, "category": "qa", "turns": ["Name three primary colours."]},
]
# The figures of a method whose steps run through a session (none for pld).
STEP_KEYS = {
    "accepted_by",
    "mat_by",
    "steps_by",
    "predicted_vs_plain",
    "decode_speedup_vs_plain",
    "achieved_of_predicted",
    "priced_vs_plain",
    "achieved_of_priced",
    "engine_ms_per_step",
    "host_ms_per_step",
    "host_ms_by_part",
    "engine_ms_by",
    "host_ms_by",
}
KEYS = {
    "tokens_per_s",
    "speedup_vs_plain",
    "speedup_vs_best_plain",
    "mat",
    "identical",
    "questions",
}


def write_questions(path: Path, questions: list[dict[str, object]] = QUESTIONS) -> Path:
    path.write_text("\n".join(json.dumps(q) for q in questions) + "\n")
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
        parse_methods("plain,fast", "torch")
    assert parse_methods("sam+tr", "torch") == ("torch:plain", "torch:sam+tr")


def test_qualified_methods_group_by_configuration_plain_first() -> None:
    text = "llamacpp:pld,torch:sam+tr,sam+tr,torch/bfloat16:plain,llamacpp:plain"
    assert parse_methods(text, "llamacpp") == (
        "llamacpp:plain",
        "llamacpp:pld",
        "llamacpp:sam+tr",  # bare: the default configuration
        "torch:plain",
        "torch:sam+tr",
        "torch/bfloat16:plain",
    )
    # `torch:` takes --dtype; an explicit auto is no dtype at all
    assert parse_methods("torch:tr,torch/auto:sam", "llamacpp", "bfloat16") == (
        "torch/bfloat16:plain",
        "torch/bfloat16:tr",
        "torch:plain",
        "torch:sam",
    )
    # The flat engine by its name, or as `--engine torch --dtype int4` named it before.
    flat = ("flat/int4:plain", "flat/int4:sam+tr")
    assert parse_methods("torch/int4:sam+tr", "llamacpp") == flat
    assert parse_methods("flat:sam+tr", "llamacpp", "float32") == flat
    assert parse_methods("torch:sam+tr", "llamacpp", "int4") == flat
    assert parse_methods("flat/int8:tr", "llamacpp") == ("flat/int8:plain", "flat/int8:tr")
    # pld is transformers' or llama-cpp-python's: a bare one (the default list's) is left out.
    assert parse_methods("plain,pld,sam", "flat/int4") == ("flat/int4:plain", "flat/int4:sam")
    assert parse_methods(" pld , tr ", "torch/float16") == (
        "torch/float16:plain",
        "torch/float16:pld",
        "torch/float16:tr",
    )


@pytest.mark.parametrize(
    ("methods", "message"),
    [
        ("gpu:plain", "unknown engine 'gpu'"),
        ("auto:sam+tr", "unknown engine 'auto'"),
        ("llamacpp/bfloat16:plain", "takes no dtype"),
        ("torch/int3:plain", "unknown dtype 'int3'"),
        ("flat/float32:plain", "flat takes int4, int8, int4-requantized, not float32"),
        ("flat:pld", "the flat engine has no pld baseline"),
        ("llamacpp:fast,torch:sam", "unknown method.*llamacpp:fast"),
        ("torch:", "unknown method"),
        (" , ", "unknown method"),
    ],
)
def test_qualified_method_errors(methods: str, message: str) -> None:
    with pytest.raises(SamchatError, match=message) as info:
        parse_methods(methods, "llamacpp")
    assert "\n" not in str(info.value)


def test_default_configuration_and_specs() -> None:
    assert default_setup(ModelSpec(source="some/dir", engine="torch")) == "torch"
    assert default_setup(ModelSpec(engine="torch", dtype="bfloat16")) == "torch/bfloat16"
    assert default_setup(ModelSpec(engine="llamacpp")) == "llamacpp"
    assert default_setup(ModelSpec(engine="flat")) == "flat/int4"
    assert default_setup(ModelSpec(engine="torch", dtype="int4")) == "flat/int4"
    base = ModelSpec(dtype="bfloat16", engine="auto")
    assert setup_spec(base, "llamacpp") == ModelSpec(engine="llamacpp")
    assert setup_spec(base, "torch/float32") == ModelSpec(engine="torch", dtype="float32")
    assert setup_spec(base, "torch") == ModelSpec(engine="torch")
    assert setup_spec(base, "flat/int8") == ModelSpec(engine="flat", dtype="int8")


def test_warm_plan_reruns_plain_only_when_named() -> None:
    methods = parse_methods("pld,sam+tr,torch:tr", "llamacpp")
    lc = ("llamacpp:plain", "llamacpp:sam+tr")
    assert warm_plan(methods, None, "llamacpp") == (methods, ())
    assert warm_plan(methods, "sam+tr", "llamacpp") == (lc, ("llamacpp:plain",))
    assert warm_plan(methods, "sam+tr, plain", "llamacpp") == (lc, ())
    assert warm_plan(methods, " llamacpp:plain ", "llamacpp") == (("llamacpp:plain",), ())
    # per configuration: torch's plain is named, llama.cpp's is not
    assert warm_plan(methods, "torch:plain,torch:tr,llamacpp:sam+tr", "llamacpp") == (
        (*lc, "torch:plain", "torch:tr"),
        ("llamacpp:plain",),
    )
    with pytest.raises(SamchatError, match="subset"):
        warm_plan(methods, "tr", "llamacpp")
    with pytest.raises(SamchatError, match="subset"):
        warm_plan(methods, "torch:sam+tr", "llamacpp")


def _run(ids: list[int], seconds: float) -> Run:
    return Run(len(ids), seconds, len(ids), list(ids), committed=len(ids))


def test_table_compares_each_method_with_its_own_plain_and_the_best_plain() -> None:
    a, b = Question("1", "qa", ("x",)), Question("2", "code", ("y",))
    results = Results(("llamacpp:plain", "llamacpp:sam+tr", "torch:plain", "torch:sam+tr"))
    for q in (a, b):
        results.add("llamacpp:plain", q, _run([1, 2, 3, 4], 1.0))  # 4 tok/s
        results.add("torch:plain", q, _run([1, 2, 3, 5], 2.0))  # 2 tok/s, another reply
        results.add("llamacpp:sam+tr", q, _run([1, 2, 3, 4], 0.5))  # 8 tok/s
    results.add("torch:sam+tr", a, _run([1, 2, 3, 5], 0.5))  # same as torch:plain
    results.add("torch:sam+tr", b, _run([1, 2, 3, 4], 0.5))  # same as llamacpp:plain only
    table = results.table()
    assert {k for rows in table.values() for r in rows.values() for k in r} == KEYS
    lc, ls, tp, ts = (table[m]["overall"] for m in results.methods)
    assert (lc["speedup_vs_plain"], lc["speedup_vs_best_plain"]) == (1.0, 1.0)
    assert (tp["speedup_vs_plain"], tp["speedup_vs_best_plain"]) == (1.0, 0.5)
    assert (ls["speedup_vs_plain"], ls["speedup_vs_best_plain"]) == (2.0, 2.0)
    assert (ts["speedup_vs_plain"], ts["speedup_vs_best_plain"]) == (4.0, 2.0)
    assert [r["identical"] for r in (lc, ls, tp, ts)] == [2, 2, 2, 1]
    assert table["torch:sam+tr"]["code"]["identical"] == 0
    text = format_table(table)
    assert "| torch:sam+tr | 8.0 | 4.00x | 2.00x | 1.00 | - | - | - | - | - | 1/2 |" in text
    assert format_host(table) == ""  # no step was timed
    assert "| qa | 4.0, 1.00x, 1.00, 1/1 |" in text


def test_the_cost_model_prices_each_step_on_the_measured_curve() -> None:
    """predicted_vs_plain: committed tokens per one-token forward's worth of cost."""
    q = Question("1", "qa", ("x",))
    results = Results(("torch:plain", "torch:sam+tr"))
    plain = _run([1, 2, 3, 4, 5, 6], 1.0)
    plain.steps_by, plain.committed_by, plain.cost = {"plain": 6}, {"plain": 6}, 6.0
    plain.decode_seconds = 0.8  # 0.2 s of prefill
    results.add("torch:plain", q, plain)
    spec = Run(6, 0.5, 2, [1, 2, 3, 4, 5, 6], committed=6)
    # two steps of 4 inputs (3 draft tokens each, all accepted), each costing 1.5 one-token ones
    spec.steps_by, spec.committed_by, spec.cost = {"dyn": 2}, {"dyn": 6}, 3.0
    spec.decode_seconds = 0.3  # the same prefill: decoding alone went 0.8 / 0.3 faster
    results.add("torch:sam+tr", q, spec)
    table = results.table()
    assert table["torch:plain"]["overall"]["predicted_vs_plain"] == 1.0
    assert table["torch:sam+tr"]["overall"]["predicted_vs_plain"] == 2.0
    assert table["torch:plain"]["overall"]["decode_speedup_vs_plain"] == 1.0
    assert table["torch:sam+tr"]["overall"]["decode_speedup_vs_plain"] == round(0.8 / 0.3, 3)
    # What the cost model's check reads: the decoding speedup over the predicted one.
    assert table["torch:sam+tr"]["overall"]["achieved_of_predicted"] == round(0.8 / 0.3 / 2, 3)
    row = "| torch:sam+tr | 12.0 | 2.00x | 2.00x | 3.00 | 2.00x | - | 2.67x | 133% | - | 1/1 |"
    assert row in format_table(table)


def test_the_cost_model_with_the_host_prices_each_steps_host_seconds() -> None:
    """priced_vs_plain: a step costs its forward on the curve, in the plain run's seconds per
    forward, and the host seconds it took; a plain step the plain run's forward and host."""
    q = Question("1", "qa", ("x",))
    results = Results(("torch:plain", "torch:sam+tr"))
    plain = _run([1, 2, 3, 4, 5, 6], 1.0)
    plain.steps_by, plain.committed_by, plain.cost = {"plain": 6}, {"plain": 6}, 6.0
    plain.engine_s_by, plain.host_s_by = {"plain": 0.060}, {"plain": 0.006}  # 10 + 1 ms a step
    plain.decode_seconds = 0.066
    results.add("torch:plain", q, plain)
    spec = Run(6, 0.5, 2, [1, 2, 3, 4, 5, 6], committed=6)
    # two steps of 1.5 one-token forwards each (30 ms on the curve), 4 ms of host each
    spec.steps_by, spec.committed_by, spec.cost = {"dyn": 2}, {"dyn": 6}, 3.0
    spec.engine_s_by, spec.host_s_by = {"dyn": 0.032}, {"dyn": 0.008}
    spec.decode_seconds = 0.040
    results.add("torch:sam+tr", q, spec)
    overall = results.table()["torch:sam+tr"]["overall"]
    assert overall["predicted_vs_plain"] == 2.0  # the curve alone
    priced = 6 * 0.011 / (3.0 * 0.010 + 0.008)  # 66 ms of plain steps against 38 predicted
    assert overall["priced_vs_plain"] == round(priced, 3)
    assert overall["achieved_of_priced"] == round(0.066 / 0.040 / priced, 3)
    assert "| 2.00x | 1.74x | 1.65x | 82% | 95% | 1/1 |" in format_table(results.table())


def test_host_time_per_step_by_part_and_by_step_kind() -> None:
    """Each step's seconds split into the engine's forward and the host's parts, reported in
    milliseconds per step for the method, by part and by step kind."""
    q = Question("1", "qa", ("x",))
    results = Results(("torch:plain", "torch:sam+tr"))
    spec = Run(6, 0.5, 4, [1, 2, 3, 4, 5, 6], committed=6)
    spec.steps_by, spec.committed_by, spec.cost = (
        {"dyn": 2, "plain": 2},
        {"dyn": 4, "plain": 2},
        5.0,
    )
    spec.engine_s_by = {"dyn": 0.010, "plain": 0.006}
    spec.host_s_by = {"dyn": 0.004, "plain": 0.002}
    spec.host_parts = {"draft": 0.002, "tree": 0.0, "accept": 0.001, "learn": 0.002, "emit": 0.001}
    results.add("torch:sam+tr", q, spec)
    overall = results.table()["torch:sam+tr"]["overall"]
    assert overall["engine_ms_per_step"] == 4.0
    assert overall["host_ms_per_step"] == 1.5
    assert overall["host_ms_by_part"] == {
        "draft": 0.5,
        "tree": 0.0,
        "accept": 0.25,
        "learn": 0.5,
        "emit": 0.25,
    }
    assert overall["engine_ms_by"] == {"dyn": 5.0, "plain": 3.0}
    assert overall["host_ms_by"] == {"dyn": 2.0, "plain": 1.0}
    text = format_host(results.table())
    assert "| method | steps | engine | host | draft | tree | accept | learn | emit |" in text
    assert "| torch:sam+tr | 4 | 4.000 | 1.500 | 0.500 | 0.000 | 0.250 | 0.500 | 0.250 |" in text
    assert "| torch:sam+tr | dyn | 2 | 5.000 | 2.000 |" in text


def test_reply_cost_prices_steps_at_the_prompts_context() -> None:
    """Steps after a long prompt cost what the long-context curve says, as the selector saw."""
    from samchat.engines.costs import CostCurve

    curve = CostCurve({1: 1.0, 2: 1.5, 4: 2.5}, context=256)
    curve.long = CostCurve({1: 1.0, 2: 2.0, 4: 3.5}, context=2048)
    assert reply_cost(curve, 100, [1, 2, 4]) == 1.0 + 1.5 + 2.5
    assert reply_cost(curve, 4000, [1, 2, 4]) == 1.0 + 2.0 + 3.5
    assert reply_cost(curve, 724, [2]) == pytest.approx(1.75, abs=0.001)  # halfway in log


def test_each_method_takes_each_slot_of_each_question_over_the_passes() -> None:
    methods = ("llamacpp:plain", "llamacpp:pld", "llamacpp:sam+tr")
    for question in range(5):
        orders = [method_order(methods, question, p) for p in range(len(methods))]
        assert all(sorted(o) == sorted(methods) for o in orders)
        for slot in range(len(methods)):
            assert {o[slot] for o in orders} == set(methods)
    # Within one pass, neighbouring questions start with different methods.
    assert len({method_order(methods, q, 0)[0] for q in range(3)}) == 3


def test_keep_fastest_keeps_each_questions_fastest_run_and_counts_changes() -> None:
    a, b = Question("1", "qa", ("x",)), Question("2", "qa", ("y",))
    first, second = Results(("torch:plain",)), Results(("torch:plain",))
    first.add("torch:plain", a, _run([1, 2], 1.0))
    first.add("torch:plain", b, _run([3, 4], 0.5))
    second.add("torch:plain", a, _run([1, 2], 0.4))  # faster: kept
    second.add("torch:plain", b, _run([3, 5], 0.9))  # slower, and another reply
    first.keep_fastest(second)
    assert first.runs["torch:plain"]["1"].seconds == 0.4
    assert first.runs["torch:plain"]["2"].seconds == 0.5
    assert first.changed == 1


def test_bad_command_line_values_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    questions = write_questions(tmp_path / "q.jsonl")
    base = ["bench", "decode", "--questions", str(questions)]

    def one_line_error(*extra: str) -> str:
        assert main([*base, *extra]) != 0
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        return err

    assert "--max-draft must be >= 0" in one_line_error("--max-draft", "-1")
    assert "--repeat must be >= 1" in one_line_error("--repeat", "0")
    assert "cannot read the cost curve" in one_line_error("--cost-curve", str(tmp_path / "none"))
    (tmp_path / "bad.json").write_text('{"relative_cost": {"2": 1.0}}')
    assert "starts at 1 input" in one_line_error("--cost-curve", str(tmp_path / "bad.json"))
    assert "subset of --methods" in one_line_error("--methods", "sam", "--warm-methods", "tr")
    assert "unknown engine 'vllm'" in one_line_error("--methods", "vllm:plain")
    assert "unknown method" in one_line_error("--methods", "llamacpp:medusa")
    assert "takes no dtype" in one_line_error("--methods", "llamacpp/bfloat16:plain")
    model_dir = tmp_path / "hf-model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    err = one_line_error("--model", str(model_dir), "--methods", "torch:plain,llamacpp:sam+tr")
    assert "runs .gguf files" in err
    monkeypatch.setattr(
        "samchat.engines.llamacpp.model.unavailable_reason", lambda: "llama-cpp-python is gone"
    )
    assert "llama-cpp-python is gone" in one_line_error("--methods", "llamacpp:plain")


def test_bench_decode_writes_table_json_and_chart(
    tmp_path: Path, default_lm: object, capsys: pytest.CaptureFixture[str]
) -> None:
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "bench.json"
    png = tmp_path / "bench.png"
    code = main(
        [
            "bench", "decode", "--questions", str(questions), "--methods", "torch:pld,torch:sam+tr",
            "--per-category", "1", "--max-new-tokens", "12", "--json", str(out), "--png", str(png),
            "--repeat", "2",
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    assert set(data) == {"meta", "torch:plain", "torch:pld", "torch:sam+tr"}
    for method in ("torch:plain", "torch:pld", "torch:sam+tr"):
        assert set(data[method]) == {"writing", "qa", "overall"}
        overall = data[method]["overall"]
        # Methods that run through a session also say how each kind of step did.
        by_drafter = STEP_KEYS if method != "torch:pld" else set()
        assert set(overall) == KEYS | by_drafter
        assert overall["questions"] == 2
        assert overall["tokens_per_s"] > 0
        assert overall["mat"] >= 1.0
        # greedy decoding is lossless: every method reproduces plain decoding exactly
        assert overall["identical"] == 2
    assert data["torch:plain"]["overall"]["mat_by"] == {"plain": 1.0}
    # Each step's time: the engine's forward and the host's parts, by step kind.
    for method in ("torch:plain", "torch:sam+tr"):
        overall = data[method]["overall"]
        assert overall["engine_ms_per_step"] > 0 and overall["host_ms_per_step"] > 0
        assert set(overall["host_ms_by_part"]) == set(HostTimes._fields)
        assert set(overall["host_ms_by"]) == set(overall["engine_ms_by"]) == set(overall["mat_by"])
        parts = sum(overall["host_ms_by_part"].values())
        assert parts == pytest.approx(overall["host_ms_per_step"], abs=0.01)
    assert data["torch:plain"]["overall"]["achieved_of_predicted"] == 1.0
    assert data["torch:sam+tr"]["overall"]["achieved_of_predicted"] > 0
    printed = capsys.readouterr().out
    assert "| cost model | with host | decoding | of prediction | of priced |" in printed
    assert "| method | steps | engine | host | draft | tree | accept | learn | emit |" in printed
    assert "| torch:plain | plain |" in printed
    assert data["torch:plain"]["overall"]["predicted_vs_plain"] == 1.0
    assert data["torch:sam+tr"]["overall"]["predicted_vs_plain"] > 0
    by = data["torch:sam+tr"]["overall"]
    assert abs(sum(by["accepted_by"].values()) - 1.0) < 0.01
    steps = sum(by["steps_by"].values())
    committed = sum(by["mat_by"][k] * n for k, n in by["steps_by"].items())
    # Per kind, a step counts every token it verified, even past the length limit, where the
    # overall MAT stops: the parts hold at least the whole.
    assert committed / steps >= by["mat"] - 0.001
    assert data["torch:plain"]["overall"]["speedup_vs_plain"] == 1.0
    assert data["torch:plain"]["overall"]["speedup_vs_best_plain"] == 1.0
    assert data["meta"]["configurations"]["torch"]["dtype"] == "float32"
    # two passes from fresh sessions: the same greedy replies, the faster of each kept
    assert (data["meta"]["repeat"], data["meta"]["replies_changed_between_runs"]) == (2, 0)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_decode_warm_up_table_reuses_plain_runs(tmp_path: Path, default_lm: object) -> None:
    questions = write_questions(tmp_path / "q.jsonl")
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench", "decode", "--questions", str(questions), "--methods", "sam+tr",
            "--per-category", "1", "--max-new-tokens", "12", "--warm-chats", "1",
            "--warm-methods", "sam+tr", "--json", str(out), "--png", str(tmp_path / "c.png"),
            "--cost-curve", "flat",
        ]
    )  # fmt: skip
    assert code == 0
    data = json.loads(out.read_text())
    default = default_setup(ModelSpec())  # bare names run on what auto picks
    plain, sam_tr = f"{default}:plain", f"{default}:sam+tr"
    assert data["meta"]["default_configuration"] == default
    # Warm-up takes the first question of each category; the evaluated one is the next qa one.
    assert set(data[sam_tr]) == {"qa", "overall"}
    warm = data["warm"]
    assert set(warm) == {plain, sam_tr}
    assert warm[plain] == data[plain]  # plain reads no index: its runs are reused
    assert warm[sam_tr]["overall"]["identical"] == 1
    assert data["meta"]["cost_curve"] == "flat"
    # Verification priced as free: SAM and Token Recycling go into one tree where both have one.
    assert set(data[sam_tr]["overall"]["steps_by"]) - {"plain"}
    assert (tmp_path / "c-warm.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.model
def test_bench_decode_compares_engines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """llama.cpp's plain, samchat's sam+tr and llama-cpp-python's own PLD against torch's plain
    on the real default model: one model per engine, each method against its engine's plain."""
    questions = write_questions(tmp_path / "q.jsonl", QUESTIONS[1:])
    out = tmp_path / "bench.json"
    methods = ["llamacpp:plain", "llamacpp:sam+tr", "llamacpp:pld", "torch:plain"]
    code = main(
        [
            "bench", "decode", "--questions", str(questions), "--methods", ",".join(methods),
            "--per-category", "2", "--max-new-tokens", "16", "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert set(data) == {"meta", *methods}
    meta = data["meta"]
    assert meta["methods"] == methods
    assert set(meta["configurations"]) == {"llamacpp", "torch"}
    assert meta["configurations"]["llamacpp"]["dtype"] == "Q4_1"
    assert meta["configurations"]["torch"]["dtype"] == "float32"
    assert set(meta["versions"]) == {"torch", "llama_cpp_python"}
    assert meta["cpu"] and isinstance(meta["cpu_flags"], list)
    assert meta["llamacpp_pld"]["num_pred_tokens"] == 10
    # Each engine as run (the torch kernels chosen by measurement) and the curve it was priced on
    engines = meta["engines"]
    assert set(engines) == {"llamacpp", "torch"}
    assert engines["llamacpp"]["engine"].startswith("llama.cpp")
    assert "kernels:" in engines["torch"]["engine"]
    assert "at the first reply" not in engines["torch"]["engine"]
    for details in engines.values():
        assert details["relative_cost"]["1"] == 1.0
        assert all(v > 0 for v in details["relative_cost"].values())
    for method in methods:
        assert set(data[method]) == {"qa", "overall"}
        row = data[method]["overall"]
        pld = method.endswith(":pld")  # not run through a session: no per-drafter figures
        session_keys = {
            "accepted_by", "mat_by", "steps_by", "predicted_vs_plain", "decode_speedup_vs_plain",
            "achieved_of_predicted", "priced_vs_plain", "achieved_of_priced", "engine_ms_per_step",
                "host_ms_per_step", "host_ms_by_part",
            "engine_ms_by", "host_ms_by",
        }  # fmt: skip
        assert set(row) == KEYS | (set() if pld else session_keys)
        assert row["questions"] == 2 and row["tokens_per_s"] > 0 and row["mat"] >= 1.0
        assert 0 <= row["identical"] <= 2
        cells = f"{row['identical']}/{row['questions']} |"
        assert any(
            line.startswith(f"| {method} |") and cells in line for line in printed.split("\n")
        )
    # samchat's drafting is lossless on llama.cpp; each plain is its own yardstick
    assert data["llamacpp:sam+tr"]["overall"]["identical"] == 2
    for plain in ("llamacpp:plain", "torch:plain"):
        assert data[plain]["overall"]["identical"] == 2
        assert data[plain]["overall"]["speedup_vs_plain"] == 1.0
    for category in ("qa", "overall"):
        plains = [data[p][category] for p in ("llamacpp:plain", "torch:plain")]
        best = max(plains, key=lambda r: r["tokens_per_s"])
        assert best["speedup_vs_best_plain"] == 1.0
        for method in methods:
            row = data[method][category]
            assert row["speedup_vs_best_plain"] == pytest.approx(
                row["tokens_per_s"] / best["tokens_per_s"], rel=0.01, abs=0.002
            )
