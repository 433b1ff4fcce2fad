"""The selector: the selection rule of SAM decoding, drafts skipped where they do not pay,
merged SAM + Token Recycling trees, buckets that recover after being written off, the
reply-start bucket, a cap that follows the curve, fixed curves and the plain calibration steps."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from samchat.decoding.params import DecodingConfig
from samchat.decoding.policy import (
    CALIBRATE_EVERY,
    AcceptanceModel,
    Selector,
    calibration_due,
)
from samchat.decoding.tree import DraftTree
from samchat.engines.costs import DEFAULT_CPU, CostCurve, CostTracker
from samchat.errors import SamchatError
from tests.fakes import FakeDrafter


def _sam(match: int, tokens: list[int]) -> FakeDrafter:
    return FakeDrafter("dyn", tokens, match=match)


def _tr(first: list[int]) -> FakeDrafter:
    """A two-level tree whose bigger sizes are expected to get more accepted."""
    return FakeDrafter("tr", first, shape="pairs", tree_sizes=(2, 4, 6, 8), expected=1.5)


def test_merge_is_a_trie_of_both_drafts() -> None:
    sam = DraftTree.sequence([5, 6, 7], "dyn")
    tr = DraftTree([5, 9, 6, 8], [-1, -1, 0, 1], "tr")  # 5 and 5->6 repeat the SAM draft
    merged = DraftTree.merge(sam, tr)
    assert merged.tokens == [5, 6, 7, 9, 8]
    assert merged.parents == [-1, 0, 1, -1, 3]
    assert [merged.source_at(i) for i in range(len(merged))] == ["dyn"] * 3 + ["tr"] * 2
    assert merged.source == "dyn+tr"
    # Every root-to-node path of either draft is a path of the merged tree.
    layout = merged.layout()
    for draft in (sam, tr):
        for i in range(len(draft)):
            path = []
            j = i
            while j >= 0:
                path.append(draft.tokens[j])
                j = draft.parents[j]
            node = 0
            for tok in reversed(path):
                node = layout.children[node][tok]
            assert merged.tokens[node - 1] == draft.tokens[i]


def test_flat_curve_merges_sam_and_recycling_and_credits_each() -> None:
    acceptance = AcceptanceModel()
    tr = _tr([1, 2, 3])
    sel = Selector(DecodingConfig(), CostCurve.flat(), acceptance, _sam(6, [5, 6, 7, 8]), None, tr)
    tree, decision = sel.choose(63)
    assert tree is not None and decision.drafter == "dyn+tr"
    assert decision.sam_size == 4 and len(tree) == 4 + 6
    # The model took the SAM draft's first two tokens, then a Token Recycling node: the SAM
    # bucket learns "2 of 4".
    sel.feedback(decision, ["dyn", "dyn", "tr"])
    expected = AcceptanceModel()
    expected.update("dyn", 6, 4, 2)
    assert acceptance.rate("dyn", 6) == expected.rate("dyn", 6) != AcceptanceModel().rate("dyn", 6)
    assert tr.feedbacks == []  # a merged step is no evidence about trees alone


def test_a_steep_curve_keeps_the_drafts_apart() -> None:
    steep = CostCurve({1: 1.0, 2: 1.6, 4: 2.5, 8: 4.0, 16: 7.3, 64: 25.0})
    sel = Selector(
        DecodingConfig(), steep, AcceptanceModel(), _sam(20, [5, 6, 7, 8]), None, _tr([1])
    )
    _, decision = sel.choose(63)
    assert "+" not in decision.drafter


def test_a_written_off_bucket_is_tried_again() -> None:
    acceptance = AcceptanceModel()
    sam = _sam(2, [5, 6, 7])
    sel = Selector(DecodingConfig(), CostCurve(DEFAULT_CPU), acceptance, sam)
    for _ in range(30):
        _, decision = sel.choose(50)
        if decision.drafter == "dyn":
            sel.feedback(decision, [])  # never accepted
    assert sel.choose(50)[1].drafter == "plain"  # written off for now
    drafted_again = False
    for _ in range(500):
        _, decision = sel.choose(50)
        if decision.drafter == "dyn":
            drafted_again = True
            break
    assert drafted_again  # skipping it made its evidence fade back toward the prior


def test_reply_start_matches_learn_apart() -> None:
    acceptance = AcceptanceModel()
    sel = Selector(DecodingConfig(), CostCurve.flat(), acceptance, _sam(4, [5, 6, 7]))
    sel.at_start = True
    _, decision = sel.choose(50)
    assert decision.key == "dyn@start"
    start_rate, rate = acceptance.rate("dyn@start", 4), acceptance.rate("dyn", 4)
    sel.feedback(decision, [])
    assert acceptance.rate("dyn@start", 4) < start_rate
    assert acceptance.rate("dyn", 4) == rate  # the body's bucket is untouched
    sel.at_start = False
    assert sel.choose(50)[1].key == "dyn"


def test_cap_follows_a_refreshed_curve() -> None:
    sel = Selector(DecodingConfig(), CostCurve.flat(), AcceptanceModel())
    assert sel.cap == 63
    sel.curve = CostCurve({1: 1.0, 33: 3.0, 64: 6.0})
    assert sel.cap == 32
    assert Selector(DecodingConfig(max_draft=8), CostCurve.flat(), AcceptanceModel()).cap == 8


def test_fixed_curves_are_never_refined(tmp_path: Path) -> None:
    tracker = CostTracker(CostCurve.flat(), every=1, min_samples=1)
    rng = random.Random(0)
    for _ in range(50):
        n = rng.choice([1, 8, 64])
        assert not tracker.record(n, 0.01 * n)
    assert tracker.curve.rel(64) == 1.0
    path = tmp_path / "curve.json"
    path.write_text(json.dumps({"relative_cost": {"1": 1.0, "8": 2.0}}))
    curve = CostCurve.from_file(path)
    assert curve.fixed and curve.rel(8) == 2.0
    for text in ("[1, 2]", "{}", '{"1": 0}', "not json", '{"2": 1.0}'):
        path.write_text(text)
        with pytest.raises(SamchatError, match="cost curve"):
            CostCurve.from_file(path)
    with pytest.raises(SamchatError, match="cannot read"):
        CostCurve.from_file(tmp_path / "missing.json")


def test_a_plain_step_recalibrates_a_measured_curve_only() -> None:
    """A curve decoding refines gets a fresh one-token time every CALIBRATE_EVERY steps; a
    fixed curve (verification priced as free) never forces one."""
    measured = CostCurve.default("cpu")
    assert not measured.fixed
    assert not calibration_due(measured, CALIBRATE_EVERY - 1)
    assert calibration_due(measured, CALIBRATE_EVERY)
    assert not calibration_due(CostCurve.flat(), 10 * CALIBRATE_EVERY)


def _selector(dynamic: int, static: int, aux: bool = False, **cfg: Any) -> Selector:
    config = DecodingConfig(adaptive=False, max_draft=16, **cfg)
    return Selector(
        config,
        CostCurve.default("cpu"),
        AcceptanceModel(),
        FakeDrafter("dyn", list(range(100, 140)), match=dynamic, tree_sizes=(4, 8)),
        FakeDrafter("static", list(range(200, 240)), match=static, tree_sizes=(4, 8)),
        FakeDrafter("tr", list(range(300, 340)), match=0, tree_sizes=(4, 8)) if aux else None,
    )


def test_selection_rule_of_sam_decoding() -> None:
    tree, d = _selector(dynamic=6, static=3).choose(100)
    assert d.drafter == "dyn" and tree is not None and tree.source == "dyn"
    assert len(tree) == 16  # min(max_draft, 1 + 4 * 6)
    tree, d = _selector(dynamic=6, static=12).choose(100)
    assert d.drafter == "static"  # 12 - l_bias > 6
    tree, d = _selector(dynamic=6, static=11).choose(100)
    assert d.drafter == "dyn"  # ties go to the dynamic SAM
    tree, d = _selector(dynamic=2, static=3, aux=True).choose(100)
    assert d.drafter == "tr" and tree is not None and len(tree) == 8  # weak match: TR
    tree, d = _selector(dynamic=2, static=3).choose(100)
    assert d.drafter == "plain" and tree is None  # weak match, no TR: a plain step
    tree, d = _selector(dynamic=1, static=0).choose(1)
    assert d.drafter == "plain"  # below threshold
    tree, d = _selector(dynamic=8, static=0).choose(3)
    assert tree is not None and len(tree) == 3  # never beyond the budget (max_new, context)
    assert _selector(dynamic=8, static=0).choose(0) == (None, _selector(0, 0).choose(0)[1])


def test_adaptive_selection_skips_drafts_that_do_not_pay() -> None:
    config = DecodingConfig(adaptive=True)
    acc = AcceptanceModel()
    dyn = FakeDrafter("dyn", [5, 6, 7], match=1, tree_sizes=(4, 8))
    sel = Selector(config, CostCurve.default("cpu"), acc, dyn)
    for _ in range(40):
        sel.feedback(sel.choose(50)[1], [])  # the short matches never get accepted
    tree, d = sel.choose(50)
    assert tree is None and d.drafter == "plain"
    dyn.match = 20
    tree, d = sel.choose(50)
    assert tree is not None and d.drafter == "dyn"  # a long match is still worth a draft
