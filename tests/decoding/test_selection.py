"""The adaptive selector: merged SAM + Token Recycling trees, buckets that recover after being
written off, the reply-start bucket, a cap that follows the curve, fixed curves and the plain
calibration steps."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from samchat.decoding.drafter import Drafter
from samchat.decoding.params import DecodingConfig
from samchat.decoding.policy import (
    CALIBRATE_EVERY,
    AcceptanceModel,
    Selector,
    calibration_due,
)
from samchat.decoding.tree import DraftTree
from samchat.engines.cost import DEFAULT_CPU, CostCurve, CostTracker
from samchat.errors import SamchatError


class Sam(Drafter):
    name = "dyn"

    def __init__(self, match: int, tokens: list[int]) -> None:
        self.match = match
        self.tokens = tokens

    def begin(self, context: Sequence[int]) -> None:
        pass

    def match_len(self) -> int:
        return self.match

    def propose(self, max_nodes: int) -> DraftTree | None:
        return DraftTree.sequence(self.tokens[:max_nodes], self.name) if self.tokens else None

    def advance(self, tokens: Sequence[int]) -> None:
        pass


class Tr(Drafter):
    """A two-level tree: `width` children of the root, each with one child."""

    name = "tr"

    def __init__(self, first: list[int], expected: float = 1.5) -> None:
        self.first = first
        self.expected = expected
        self.feedbacks: list[int] = []

    def begin(self, context: Sequence[int]) -> None:
        pass

    def propose(self, max_nodes: int) -> DraftTree | None:
        tokens: list[int] = []
        parents: list[int] = []
        for t in self.first:
            if len(tokens) + 2 > max_nodes:
                break
            tokens += [t, t + 1000]
            parents += [-1, len(tokens) - 2]
        return DraftTree(tokens, parents, self.name) if tokens else None

    def advance(self, tokens: Sequence[int]) -> None:
        pass

    def tree_sizes(self) -> Sequence[int]:
        return (2, 4, 6, 8)

    def expected_accepted(self, max_nodes: int) -> float:
        return self.expected * max_nodes / 8  # bigger trees, more expected

    def feedback(self, accepted: int) -> None:
        self.feedbacks.append(accepted)


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
    tr = Tr([1, 2, 3])
    sel = Selector(DecodingConfig(), CostCurve.flat(), acceptance, Sam(6, [5, 6, 7, 8]), None, tr)
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
    sel = Selector(DecodingConfig(), steep, AcceptanceModel(), Sam(20, [5, 6, 7, 8]), None, Tr([1]))
    _, decision = sel.choose(63)
    assert "+" not in decision.drafter


def test_a_written_off_bucket_is_tried_again() -> None:
    acceptance = AcceptanceModel()
    sam = Sam(2, [5, 6, 7])
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
    sel = Selector(DecodingConfig(), CostCurve.flat(), acceptance, Sam(4, [5, 6, 7]))
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
