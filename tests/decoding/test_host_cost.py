"""The host's time per step, priced beside the verification curve: the priced curve's arithmetic,
evidence that fades and outliers that are clipped, the selector passing over a draft that cannot
pay for its host time, and a drafter made slow on purpose chosen less by a session on the real
model, whose replies stay those of plain decoding."""

from __future__ import annotations

import time
from typing import Any

import pytest

from samchat.decoding import ChatSession, DecodingConfig, SamplingParams, StepStats, TextDelta
from samchat.decoding.policy import AcceptanceModel, Selector
from samchat.decoding.policy.hostcost import HostCosts
from samchat.engines.costs import DEFAULT_CPU, CostCurve
from tests.fakes import FakeDrafter

CURVE = CostCurve({1: 1.0, 8: 1.5, 16: 2.0, 64: 4.0})


def _steps(host: HostCosts, kind: str, n: int, host_s: float, count: int = 20) -> None:
    """`count` steps of `kind` with `n` inputs: 10 ms of engine per one-token forward."""
    for _ in range(count):
        host.record(kind, n, host_s, 0.010 * CURVE.rel(n), CURVE.rel(n))


def test_priced_curve_adds_the_host_time_beyond_a_plain_step() -> None:
    host = HostCosts()
    assert host.priced("dyn", CURVE) is CURVE  # nothing measured yet: the bare curve
    _steps(host, "plain", 1, 0.001)
    _steps(host, "dyn", 8, 0.005)
    assert host.t1 == pytest.approx(0.010)
    evidence = host.seconds("dyn", 8) / 0.004
    assert 0.9 < evidence < 1.0  # the prior's share is left
    priced = host.priced("dyn", CURVE)
    # A step of 8 inputs: 15 ms of engine, 1 ms of plain host time and the extra 4 ms, in
    # plain steps of 11 ms.
    assert priced.rel(8) == pytest.approx((15 + 1 + 4 * evidence) / 11)
    assert priced.rel(1) == pytest.approx((10 + 1 + host.seconds("dyn", 1) * 1000) / 11)
    # A kind never seen costs the curve with the plain step's host time spread over it.
    assert host.priced("tr", CURVE).rel(8) == pytest.approx((15 + 1) / 11)
    assert host.priced("tr", CURVE).rel(1) == pytest.approx(1.0)
    # Beyond the curve's last point it goes on along the curve.
    assert priced.rel(80) - priced.rel(64) == pytest.approx(CURVE.rel(80) - CURVE.rel(64))
    # A fixed curve (given on purpose: a simulated GPU's) takes no host time of this machine.
    flat = CostCurve.flat()
    assert host.priced("dyn", flat) is flat


def test_host_time_grows_with_the_inputs() -> None:
    host = HostCosts()
    _steps(host, "plain", 1, 0.001)
    for n in (4, 8, 16, 32):
        _steps(host, "tr", n, 0.001 + 0.0001 * n, count=5)
    assert host.seconds("tr", 32) > host.seconds("tr", 16) > host.seconds("tr", 4)
    assert host.seconds("tr", 16) == pytest.approx(0.0016, rel=0.1)  # the prior's share off


def test_a_kind_not_stepped_fades_back_toward_the_bare_curve() -> None:
    host = HostCosts()
    _steps(host, "plain", 1, 0.001)
    _steps(host, "dyn", 8, 0.050)
    before = host.seconds("dyn", 8)
    _steps(host, "tr", 8, 0.001, count=200)
    after = host.seconds("dyn", 8)
    assert 0.0 < after < before / 2
    # Steps of its own bring its price back.
    _steps(host, "dyn", 8, 0.050, count=5)
    assert host.seconds("dyn", 8) > after


def test_one_preempted_step_is_no_price() -> None:
    host = HostCosts()
    _steps(host, "plain", 1, 0.001)
    _steps(host, "dyn", 8, 0.002)
    steady = host.seconds("dyn", 8)
    _steps(host, "dyn", 8, 1.0, count=1)  # the process lost the CPU for a second
    assert host.seconds("dyn", 8) < 2 * steady


def test_the_selector_passes_over_a_draft_that_cannot_pay_for_its_host_time() -> None:
    """The same SAM match and curve: drafted while the host's time is unknown or small, a
    plain step once each drafted step is known to cost the host several forwards."""
    config = DecodingConfig(method="sam")
    host = HostCosts()
    sam = FakeDrafter("dyn", list(range(100, 140)), match=6)
    selector = Selector(config, CURVE, AcceptanceModel(), sam)
    selector.host = host
    tree, decision = selector.choose(63)
    assert tree is not None and decision.drafter == "dyn"
    _steps(host, "plain", 1, 0.001)
    _steps(host, "dyn", len(tree) + 1, 0.002)
    assert selector.choose(63)[1].drafter == "dyn"  # 1 ms more: it still pays
    _steps(host, "dyn", len(tree) + 1, 0.100, count=60)  # 10 forwards' worth a step
    tree, decision = selector.choose(63)
    assert tree is None and decision.drafter == "plain"
    # SAM-Decoding's rule prices nothing.
    rule = Selector(DecodingConfig(method="sam", adaptive=False), CURVE, AcceptanceModel(), sam)
    rule.host = host
    assert rule.choose(63)[1].drafter == "dyn"


MESSAGES = [{"role": "user", "content": "Count from one to twelve in words."}]


def _replies(session: ChatSession, turns: int, tokens: int) -> tuple[list[list[int]], list[str]]:
    """`turns` replies to the same question: their ids and each step's drafter."""
    replies, drafters = [], []
    for _ in range(turns):
        ids: list[int] = []
        for ev in session.generate(MESSAGES, SamplingParams(max_new_tokens=tokens)):
            if isinstance(ev, TextDelta):
                ids.extend(ev.token_ids)
            elif isinstance(ev, StepStats):
                drafters.append(ev.drafter)
                assert ev.engine_s > 0 and ev.host.total > 0
        replies.append(ids)
    return replies, drafters


@pytest.mark.model
def test_a_drafter_slow_on_the_host_is_chosen_less(default_lm: Any) -> None:
    """Two Token Recycling stand-ins expected to get the same tokens accepted, one taking 100
    one-token forwards of host time per proposal: the session learns its price from its first
    steps and drafts with it far less. Both decode exactly what plain decoding does."""
    turns, tokens = 3, 24
    plain = ChatSession(default_lm, DecodingConfig(method="plain"))
    t0 = time.perf_counter()
    reference, _ = _replies(plain, 1, tokens)
    t1 = (time.perf_counter() - t0) / max(1, len(reference[0]))
    counts = {}
    for name, delay in (("fast", 0.0), ("slow", 100 * t1)):
        curve = CostCurve(dict(DEFAULT_CPU))  # refined from this run's own steps
        session = ChatSession(default_lm, DecodingConfig(method="tr"), cost_curve=curve)
        script = list(range(1000, 1100))
        session.aux_drafter = FakeDrafter("tr", script, tree_sizes=(12,), expected=2.0, delay=delay)
        replies, drafters = _replies(session, turns, tokens)
        assert replies == reference * turns  # lossless, priced or not
        counts[name] = drafters.count("tr")
    assert counts["fast"] >= turns * tokens // 2
    assert 1 <= counts["slow"] <= counts["fast"] // 4
