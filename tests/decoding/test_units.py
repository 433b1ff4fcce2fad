"""Streaming text, stop strings, cost curves, draft sizing and the selection rule."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from samchat.decoding.drafter import Drafter
from samchat.decoding.params import (
    METHODS,
    DecodingConfig,
    KnobError,
    SamplingParams,
    from_mapping,
    knob_of,
    knobs,
    to_mapping,
)
from samchat.decoding.policy import (
    REPLY_FADE,
    REPLY_START,
    AcceptanceModel,
    Selector,
    best_sequence_length,
    bucket,
)
from samchat.decoding.sam_drafters import DynamicSamDrafter
from samchat.decoding.textstream import IncrementalDetokenizer, StopMatcher
from samchat.decoding.tree import DraftTree
from samchat.engines.cost import (
    CURVE_VERSION,
    SIZES,
    CostCurve,
    CostTracker,
    MeasurementCancelled,
    load_or_measure,
    measure_engine,
)
from samchat.engines.torch.measure import measure_cost_curve
from samchat.errors import SamchatError
from tests.fakes import ClockedEngine


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from samchat.models import load_tokenizer

    tok, _ = load_tokenizer()
    return tok


def test_detokenizer_never_splits_multibyte_characters(tokenizer: Any) -> None:
    text = "Grüße aus Köln 🌍🚀 — 東京タワー は 333 m です。 naïve café ✓"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(text.split())  # some characters span several tokens
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push([t]) for t in ids]
    deltas.append(detok.flush())
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)
    # Pushing several tokens at once gives the same text.
    detok2 = IncrementalDetokenizer(tokenizer)
    chunks = [ids[i : i + 3] for i in range(0, len(ids), 3)]
    assert "".join(detok2.push(c) for c in chunks) + detok2.flush() == text


def test_stop_matcher_finds_and_holds_back() -> None:
    stop = StopMatcher(("END", "\n\n"))
    assert stop
    assert stop.find("abc EN", 0) == -1
    assert stop.safe_len("abc EN") == 4  # "EN" may begin "END"
    assert stop.find("abc END more", 4) == 4
    assert stop.safe_len("abc\n") == 3
    assert stop.safe_len("abc") == 3
    assert not StopMatcher(("",))


def test_cost_curve_interpolates_between_measured_points() -> None:
    curve = CostCurve({1: 2.0, 2: 2.5, 8: 2.4, 16: 4.0})
    assert curve.rel(1) == 1.0
    assert curve.rel(2) == 1.25
    assert curve.rel(8) == 1.2  # a measured dip is kept: some shapes get faster kernels
    assert curve.rel(5) == pytest.approx(1.225)
    assert curve.rel(12) == pytest.approx(1.6)
    assert curve.rel(32) > curve.rel(16)  # extrapolated beyond the last point


def test_cost_curve_never_falls_beyond_its_last_point() -> None:
    curve = CostCurve({1: 1.0, 48: 2.4, 64: 2.2})  # a dip between the last two points
    assert curve.rel(64) == pytest.approx(2.2)
    assert curve.rel(200) == pytest.approx(2.2)


def test_a_curve_with_a_long_context_part_is_priced_at_the_context(tmp_path: Any) -> None:
    """Verification after a long context costs relatively more (llama.cpp): `at(context)`
    follows the short curve up to its context, each longer one from its context on, linear in
    log(context) between; the cache keeps every part."""
    short = CostCurve({1: 1.0, 2: 1.6, 4: 2.4, 64: 25.0})
    mid = CostCurve({1: 1.0, 2: 1.9, 4: 3.0, 16: 9.0}, context=1024)
    mid.long = CostCurve({1: 1.0, 2: 2.0, 4: 3.2, 16: 10.0}, context=2048)
    short.long = mid
    assert short.at(100) is short and short.at(256) is short
    assert short.at(1024).rel(4) == pytest.approx(3.0)
    assert short.at(2048).rel(4) == pytest.approx(3.2)
    assert short.at(9000).rel(2) == pytest.approx(2.0)  # held beyond the longest context
    middle = short.at(512)  # halfway from 256 to 1,024 in log(context)
    assert middle.rel(2) == pytest.approx(1.75) and middle.rel(4) == pytest.approx(2.7)
    assert middle.long is None and middle.at(4000) is middle
    upper = short.at(1448)  # ~halfway from 1,024 to 2,048
    assert upper.rel(4) == pytest.approx(3.1, abs=0.002)
    plain = CostCurve({1: 1.0, 4: 2.0})  # no long part (torch): the same at every context
    assert plain.at(5000) is plain

    path = tmp_path / "curve.json"

    def measure() -> CostCurve:
        return short

    load_or_measure(measure, path)
    data = json.loads(path.read_text())
    assert data["context"] == 256 and data["long"]["context"] == 1024
    assert data["long"]["long"]["context"] == 2048

    def fail() -> CostCurve:
        raise AssertionError("the cached curve should have been read")

    again = load_or_measure(fail, path)
    assert again.long is not None and again.at(2048).rel(4) == pytest.approx(3.2)
    assert again.at(512).rel(4) == pytest.approx(2.7)


def test_a_session_prices_drafts_at_its_prompt_length(default_lm: Any) -> None:
    """The selector of a reply gets the curve at the prompt's length; the tracker is rebased on
    it each reply."""
    from samchat.decoding import ChatSession, DecodingConfig

    curve = CostCurve({1: 1.0, 2: 1.5, 64: 20.0}, fixed=True)
    curve.long = CostCurve({1: 1.0, 2: 3.0, 64: 60.0}, context=1024)
    session = ChatSession(default_lm, DecodingConfig(method="sam+tr"), cost_curve=curve)
    short = session._plan_drafting(200)
    assert short is not None and short.selector.curve.rel(2) == pytest.approx(1.5)
    long = session._plan_drafting(512)  # halfway from 256 to 1,024 tokens in log(context)
    assert long is not None and long.selector.curve.rel(2) == pytest.approx(2.25)
    assert long.tracker.curve is long.selector.curve


def test_engine_curve_prices_a_draft_as_decoding_meets_it() -> None:
    """A draft replaces one of a run of one-token forwards: its cost is its own forward plus
    what the one-token forward after it loses, against one-token forwards in a row. Timing the
    sizes back to back (as before) made every reference forward pay a switch, and drafts look
    cheap (2 rows: 1.4x one here, against 5x)."""
    engine = ClockedEngine(switch=1.5)
    curve = measure_engine(engine, 100, context=8, reps=3, long_contexts=(16,), clock=engine.clock)
    assert curve.rel(1) == 1.0
    for n in (2, 4, 64):
        assert curve.rel(n) == pytest.approx(n + 3.0)  # n + 1.5, then 1 + 1.5, less 1
    assert curve.long is not None and curve.long.context == 16
    assert curve.long.rel(16) == pytest.approx(19.0)
    assert engine.read == 16  # the long context extends the short one: no token read twice
    assert engine.length == 0  # emptied afterwards


def test_a_stopped_measurement_leaves_the_engine_empty() -> None:
    """A session's own engine may be the one timed: stopped or failed, it keeps no random rows."""
    engine = ClockedEngine()
    asked = iter(range(1000))
    with pytest.raises(MeasurementCancelled):
        measure_engine(
            engine, 100, context=8, reps=3, clock=engine.clock, cancelled=lambda: next(asked) > 5
        )
    assert engine.read == 8 and engine.length == 0
    assert measure_engine(engine, 100, reps=0, clock=engine.clock).xs == [1]  # nothing timed


def test_engine_curve_waits_for_the_logits_as_decoding_does() -> None:
    """Timing only the call of an asynchronous forward measured its launch: every size looked as
    cheap as one row, a flat curve that would plan 64-row trees."""
    engine = ClockedEngine(asynchronous=True)
    curve = measure_engine(engine, 100, context=8, reps=3, clock=engine.clock)
    for n in (2, 8, 64):
        assert curve.rel(n) == pytest.approx((n + 1.2 - 1.1) / 1.1)


def test_measured_curve_is_cached(tmp_path: Any, one_thread: None) -> None:
    from tests.decoding.conftest import make_tiny_llama

    model = make_tiny_llama()
    measured = measure_cost_curve(model, torch.device("cpu"), context=32, reps=1)
    # Tiny-model timings are noise: only the shape of the result is certain.
    assert measured.rel(1) == 1.0 and min(measured.ys) > 0 and measured.xs == list(SIZES)
    path = tmp_path / "curve.json"

    def measure() -> CostCurve:
        return measure_cost_curve(model, torch.device("cpu"), context=32, reps=1)

    first = load_or_measure(measure, path)
    assert path.exists()
    cached = '{"version": %d, "relative_cost": {"1": 1.0, "4": %s, "64": 7.0}}'
    path.write_text(cached % (CURVE_VERSION, "1.5"))
    assert load_or_measure(measure, path).rel(64) == 7.0
    # A curve of the old verification path, or one measured under heavy load: re-measured.
    path.write_text(cached % (CURVE_VERSION - 1, "1.5"))
    assert load_or_measure(measure, path).xs == first.xs
    path.write_text(cached % (CURVE_VERSION, "6.0"))
    assert load_or_measure(measure, path).xs == first.xs
    # Measured in the withdrawn exact mode (padded attention): not these costs.
    exact = {"version": CURVE_VERSION, "relative_cost": {"1": 1.0, "64": 7.0}, "exact": True}
    path.write_text(json.dumps(exact))
    assert load_or_measure(measure, path).xs == first.xs
    assert "exact" not in json.loads(path.read_text())
    assert json.loads(path.read_text())["version"] == CURVE_VERSION
    for degenerate in ({}, {"1": 0.0, "4": 1.0}, {"1": 1.0, "4": -1.0}):
        path.write_text(json.dumps({"version": CURVE_VERSION, "relative_cost": degenerate}))
        assert load_or_measure(measure, path).xs == first.xs
    path.write_text("garbage")  # unreadable: measured again
    assert load_or_measure(measure, path).xs == first.xs


def test_sequence_length_follows_rate_and_cost() -> None:
    cpu = CostCurve.default("cpu")
    gpu = CostCurve.default("cuda")
    assert best_sequence_length(0.0, 32, cpu)[0] == 0  # nothing gets accepted: plain step
    assert best_sequence_length(0.1, 32, cpu)[0] == 0  # 10% does not pay 25% extra cost
    n_mid, v_mid = best_sequence_length(0.6, 32, cpu)
    n_hi, v_hi = best_sequence_length(0.95, 32, cpu)
    assert 1 <= n_mid <= n_hi <= 32 and 1.0 < v_mid < v_hi
    assert best_sequence_length(0.95, 63, gpu)[0] > n_hi  # a flat curve affords longer drafts
    assert best_sequence_length(0.95, 5, cpu)[0] <= 5


def test_acceptance_model_learns_per_bucket() -> None:
    model = AcceptanceModel()
    prior = model.rate("dyn", 6)
    for _ in range(50):
        model.update("dyn", 6, 8, 8)  # everything accepted
    assert model.rate("dyn", 6) > prior
    for _ in range(50):
        model.update("dyn", 2, 4, 0)
    assert model.rate("dyn", 2) < 0.05
    assert model.rate("static", 6) == prior  # per drafter
    assert bucket(0) == 0 and bucket(5) == bucket(7) and bucket(8) > bucket(7)


def test_acceptance_fade_moves_rates_back_toward_the_prior() -> None:
    model = AcceptanceModel()
    prior = model.rate("dyn", 20)
    for _ in range(40):
        model.update("dyn", 20, 16, 16)  # long drafts all accepted on one kind of text
    learned = model.rate("dyn", 20)
    faded = AcceptanceModel()
    for _ in range(40):
        faded.update("dyn", 20, 16, 16)
    faded.fade(REPLY_FADE)
    faded.fade(REPLY_FADE)
    assert prior < faded.rate("dyn", 20) < learned
    for m in (model, faded):  # then the same failures on new text
        for _ in range(3):
            m.update("dyn", 20, 16, 0)
    assert faded.rate("dyn", 20) < model.rate("dyn", 20)


def test_reply_start_evidence_survives_the_reply_fade() -> None:
    # A reply's first step is drafted at most once per reply: with its evidence halved each
    # reply it could never outweigh the prior, and a start match that always fails would be
    # drafted at every reply.
    model = AcceptanceModel()
    key = "dyn" + REPLY_START
    prior = model.rate(key, 6)
    for _ in range(10):
        model.fade(REPLY_FADE)
        model.update(key, 6, 1, 0)
        model.update("dyn", 6, 1, 0)
    assert model.rate(key, 6) < 0.5 * prior
    assert model.rate("dyn", 6) > model.rate(key, 6)  # the body's buckets fade as before


class FixedDrafter(Drafter):
    def __init__(self, name: str, match: int, tokens: list[int]) -> None:
        self.name = name
        self.match = match
        self.tokens = tokens
        self.asked: list[int] = []

    def begin(self, context: Sequence[int]) -> None:
        pass

    def match_len(self) -> int:
        return self.match

    def propose(self, max_nodes: int) -> DraftTree | None:
        self.asked.append(max_nodes)
        return DraftTree.sequence(self.tokens[:max_nodes], self.name) if self.tokens else None

    def advance(self, tokens: Sequence[int]) -> None:
        pass

    def tree_sizes(self) -> Sequence[int]:
        return (4, 8)


def _selector(dyn: int, static: int, aux: bool = False, **cfg: Any) -> Selector:
    config = DecodingConfig(adaptive=False, max_draft=16, **cfg)
    return Selector(
        config,
        CostCurve.default("cpu"),
        AcceptanceModel(),
        FixedDrafter("dyn", dyn, list(range(100, 140))),
        FixedDrafter("static", static, list(range(200, 240))),
        FixedDrafter("tr", 0, list(range(300, 340))) if aux else None,
    )


def test_selection_rule_of_sam_decoding() -> None:
    tree, d = _selector(dyn=6, static=3).choose(100)
    assert d.drafter == "dyn" and tree is not None and tree.source == "dyn"
    assert len(tree) == 16  # min(max_draft, 1 + 4 * 6)
    tree, d = _selector(dyn=6, static=12).choose(100)
    assert d.drafter == "static"  # 12 - l_bias > 6
    tree, d = _selector(dyn=6, static=11).choose(100)
    assert d.drafter == "dyn"  # ties go to the dynamic SAM
    tree, d = _selector(dyn=2, static=3, aux=True).choose(100)
    assert d.drafter == "tr" and tree is not None and len(tree) == 8  # weak match: TR
    tree, d = _selector(dyn=2, static=3).choose(100)
    assert d.drafter == "plain" and tree is None  # weak match, no TR: a plain step
    tree, d = _selector(dyn=1, static=0).choose(1)
    assert d.drafter == "plain"  # below threshold
    tree, d = _selector(dyn=8, static=0).choose(3)
    assert tree is not None and len(tree) == 3  # never beyond the budget (max_new, context)
    assert _selector(dyn=8, static=0).choose(0) == (None, _selector(0, 0).choose(0)[1])


def test_adaptive_selection_skips_drafts_that_do_not_pay() -> None:
    config = DecodingConfig(adaptive=True)
    acc = AcceptanceModel()
    dyn = FixedDrafter("dyn", 1, [5, 6, 7])
    sel = Selector(config, CostCurve.default("cpu"), acc, dyn)
    for _ in range(40):
        sel.feedback(sel.choose(50)[1], [])  # the short matches never get accepted
    tree, d = sel.choose(50)
    assert tree is None and d.drafter == "plain"
    dyn.match = 20
    tree, d = sel.choose(50)
    assert tree is not None and d.drafter == "dyn"  # a long match is still worth a draft


def test_dynamic_drafter_drafts_from_earlier_text_and_keeps_it_across_edits() -> None:
    d = DynamicSamDrafter()
    d.begin([1, 2, 3, 4, 5, 9, 1, 2, 3])
    assert d.match_len() == 3
    tree = d.propose(4)
    assert tree is not None and tree.tokens == [4, 5, 9, 1]
    d.advance([4, 5])
    assert d.match_len() == 5
    # The next call's context extends the text: incremental.
    d.begin([1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 5, 7])
    assert d.text_tokens == 12 and d.match_len() == 0
    # An edit: the old text stays in the automaton and still drafts; the cursor restarts.
    d.begin([8, 8, 1, 2])
    assert d.text_tokens == 16 and d.match_len() == 2
    tree = d.propose(3)
    assert tree is not None and tree.tokens == [3, 4, 5]
    d.begin([8, 8, 1, 2, 6])  # extends the edited conversation: incremental again
    assert d.text_tokens == 17
    # Once the automaton outgrows the conversation it is rebuilt from the context alone.
    d.begin(list(range(100, 100 + 2 * DynamicSamDrafter.REBUILD_SLACK)))
    d.begin([7, 7, 7])
    assert d.text_tokens == 3 and d.match_len() == 2
    tree = d.propose(3)
    assert tree is not None and tree.tokens == [7, 7]


def test_invalid_settings_are_one_line_errors() -> None:
    with pytest.raises(SamchatError, match="unknown decoding method"):
        DecodingConfig(method="fast").validate()
    with pytest.raises(SamchatError, match=r"max_draft must be an integer >= 0, got -1$"):
        DecodingConfig(max_draft=-1).validate()
    with pytest.raises(SamchatError, match=r"top_p must be a number in \(0, 1\], got 1.5$"):
        SamplingParams(top_p=1.5).validate()
    with pytest.raises(SamchatError, match=r"^decoding.adaptive must be true or false, got 1$"):
        DecodingConfig(adaptive=1).validate()  # type: ignore[arg-type]
    with pytest.raises(SamchatError, match=r"static_context must be an integer >= 1, got 0$"):
        DecodingConfig(static_context=0).validate()  # context[-0:] would feed everything


def test_every_knob_is_declared_with_help_and_a_valid_default() -> None:
    for cls in (DecodingConfig, SamplingParams):
        declared = knobs(cls)
        assert [k.name for k in declared] == [f.name for f in dataclasses.fields(cls)]
        for k in declared:
            assert k.help and k.section == cls.SECTION
            assert k.check(k.default) == k.default
        cls().validate()
    assert knob_of(DecodingConfig, "method").choices == METHODS
    seed = knob_of(SamplingParams, "seed")
    assert seed.optional and seed.type is int and seed.default is None


def test_from_mapping_checks_types_and_fills_defaults() -> None:
    params = from_mapping(SamplingParams, {"temperature": 1, "stop": ["x"], "seed": None})
    assert params == SamplingParams(temperature=1.0, stop=("x",))
    assert isinstance(params.temperature, float)  # an int is fine for a float knob
    assert to_mapping(params)["stop"] == ("x",)
    assert from_mapping(DecodingConfig, {}) == DecodingConfig()
    for values, message in (
        ({"temperature": True}, r"^sampling.temperature must be a number >= 0, got True$"),
        ({"top_k": "3"}, r"^sampling.top_k must be an integer >= 0, got '3'$"),
        ({"top_k": 2.0}, r"^sampling.top_k must be an integer >= 0, got 2.0$"),
        ({"temperature": float("nan")}, r"temperature must be a number >= 0, got nan$"),
        ({"stop": "x"}, r"^sampling.stop must be a list of strings, got 'x'$"),
        ({"seed": -1}, r"^sampling.seed must be an integer in \[0, \d+\] or unset, got -1$"),
        ({"beam": 4}, r"^unknown sampling setting 'beam'; known: max_new_tokens, "),
    ):
        with pytest.raises(SamchatError, match=message):
            from_mapping(SamplingParams, values)
    with pytest.raises(SamchatError, match=r"^ask: decoding.method: unknown decoding method"):
        from_mapping(DecodingConfig, {"method": "fast"}, where="ask")


def test_knobs_parse_typed_text() -> None:
    k = {x.name: x for x in [*knobs(DecodingConfig), *knobs(SamplingParams)]}
    assert k["top_p"].parse(" 1 ") == 1.0 and isinstance(k["top_p"].parse("1"), float)
    assert k["max_draft"].parse("16") == 16
    assert k["adaptive"].parse("off") is False and k["adaptive"].parse("True") is True
    assert k["seed"].parse("") is None and k["seed"].parse("7") == 7
    assert k["stop"].parse("a,b") == ("a", "b") and k["stop"].parse("") == ()
    for name in ("seed", "top_p", "adaptive", "stop"):
        value = {"seed": 7, "top_p": 0.5, "adaptive": False, "stop": ("a", "b")}[name]
        assert k[name].parse(k[name].text(value)) == value
    with pytest.raises(KnobError) as caught:
        k["max_new_tokens"].parse("lots")
    assert caught.value.problem == "must be an integer >= 1, got 'lots'"
    assert str(caught.value) == "sampling.max_new_tokens must be an integer >= 1, got 'lots'"


def test_cost_tracker_refits_the_curve_from_real_forwards() -> None:
    base = CostCurve({1: 1.0, 8: 1.2, 64: 2.0})
    tracker = CostTracker(base, every=10, min_samples=3)
    refreshed = False
    for i in range(40):  # a loaded machine: 8-token forwards cost 3x a single token
        refreshed |= tracker.record(1 if i % 2 else 8, 0.1 if i % 2 else 0.3)
    assert refreshed
    assert tracker.curve.rel(8) == pytest.approx(3.0, rel=0.05)
    # Unobserved bigger sizes: the base scaled like the observed neighbour, never cheaper.
    assert tracker.curve.rel(64) == pytest.approx(2.0 * 3.0 / 1.2, rel=0.05)
    only_drafts = CostTracker(base, every=5)
    assert not any(only_drafts.record(8, 0.3) for _ in range(20))  # no baseline: keep base
    assert only_drafts.curve is base
