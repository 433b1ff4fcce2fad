"""What a session keeps across replies to plan each one's drafting: the drafters (made when
first needed), this machine's cost curve (given, cached or measured; unknown while a front end
has not timed the machine yet), the tracker that refines it, the host's time per step and the
acceptance model."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from samchat.decoding.params import DecodingConfig
from samchat.decoding.policy import AcceptanceModel, Drafting, HostCosts
from samchat.decoding.protocols import Drafter, DraftIndex, SessionModel
from samchat.engines import Engine
from samchat.engines.costs import CostCurve, CostTracker

log = logging.getLogger(__name__)

Drafters = tuple[Drafter | None, Drafter | None, Drafter | None]


class ReplyPlanner:
    def __init__(
        self,
        lm: SessionModel,
        config: DecodingConfig,
        engine: Engine,
        cost_curve: CostCurve | None,
        cache_dir: Path | None,
        measure_first: bool,
    ) -> None:
        self.lm, self.config, self.engine, self.cache_dir = lm, config, engine, cache_dir
        self.acceptance = AcceptanceModel()
        self.curve = cost_curve
        self.measure_first = measure_first
        self.curve_missing = False  # a reply ran plainly because the curve is not measured yet
        self._tracker: CostTracker | None = None
        self.host = HostCosts()  # the host's seconds per kind of step, from real steps
        self.static_index: DraftIndex | None = None
        self.dynamic: Drafter | None = None
        self.static: Drafter | None = None
        self.recycling: Drafter | None = None  # Token Recycling plugs in here
        self._recycling_tried = False

    def _curve_for_device(self) -> CostCurve:
        if self.curve is None:
            self.curve = self.engine.meter.cost_curve()
        return self.curve

    def known_curve(self) -> CostCurve | None:
        """The cost curve, measured first unless measure_first is off (then None while it is
        not known: that reply runs plainly)."""
        if self.curve is None and not self.measure_first:
            self.curve = self.engine.meter.cached_cost_curve()
            self.curve_missing = self.curve is None
            return self.curve
        return self._curve_for_device()

    def measure(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Measure this machine's verification costs now (see ChatSession.measure_cost_curve)."""
        if self.curve is None:
            self.curve = self.engine.meter.cost_curve(cancelled)
        self.engine.meter.fit()
        self.curve_missing = False

    def drafters(self, plain_reason: str | None) -> Drafters:
        cfg = self.config
        if cfg.method == "plain" or plain_reason:
            return None, None, None
        dynamic = static = aux = None
        if cfg.uses_sam:
            if self.dynamic is None:
                self.dynamic = _make_dynamic()
            dynamic = self.dynamic
            if self.static is None and self.static_index is not None:
                self.static = _make_static(self.static_index, cfg)
            static = self.static
        if cfg.uses_recycling:
            if self.recycling is None and not self._recycling_tried:
                self._recycling_tried = True
                self.recycling = _make_recycling(self.lm, self.cache_dir)
            aux = self.recycling
        return dynamic, static, aux

    def plan(self, context: int, plain_reason: str | None, trees: bool) -> Drafting | None:
        """This reply's drafters and selector, priced on the cost curve after `context` cached
        tokens (the policy's Drafting.plan)."""
        drafters = self.drafters(plain_reason)
        if all(d is None for d in drafters):
            return None
        known = self.known_curve()
        if known is None:  # not measured yet: plain decoding is exact and needs no prices
            return None
        curve = known.at(context)
        if self._tracker is None:
            self._tracker = CostTracker(curve)
        tracker = self._tracker
        tracker.rebase(curve)
        exact = self.engine.exact_rows
        return Drafting.plan(
            self.config, tracker, self.acceptance, drafters, trees, exact, self.host
        )


def _make_dynamic() -> Drafter | None:
    try:
        from samchat.decoding.automaton_drafters import DynamicSamDrafter
    except ImportError as exc:
        log.warning("dynamic SAM drafter unavailable: %s", exc)
        return None
    return DynamicSamDrafter()


def _make_static(index: DraftIndex, config: DecodingConfig) -> Drafter | None:
    try:
        from samchat.decoding.automaton_drafters import StaticSamDrafter
    except ImportError as exc:
        log.warning("static SAM drafter unavailable: %s", exc)
        return None
    return StaticSamDrafter(index, context=config.static_context, tree_topk=config.static_tree_topk)


def _make_recycling(lm: SessionModel, cache_dir: Path | None) -> Drafter | None:
    from samchat.decoding.token_recycling import TokenRecyclingDrafter

    return TokenRecyclingDrafter.for_model(lm, cache_dir)
