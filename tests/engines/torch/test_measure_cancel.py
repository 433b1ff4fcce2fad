"""A cost-curve measurement stops at once when its caller asks (the app closing while it times
the machine after a first reply): on both engines, with nothing cached."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from samchat.decoding.session import ChatSession
from samchat.engines.costs import MeasurementCancelled
from samchat.engines.costs.measurement import measure_engine
from samchat.engines.llamacpp.engine import LlamaCppEngine, LlamaCppMeter
from samchat.engines.torch.measure import measure_cost_curve

pytestmark = pytest.mark.model


def test_measurements_stop_when_cancelled(default_lm: Any, gguf_lm: Any) -> None:
    calls: list[int] = []

    def after(n: int) -> Any:
        def cancelled() -> bool:
            calls.append(1)
            return len(calls) > n

        return cancelled

    with pytest.raises(MeasurementCancelled):
        measure_cost_curve(default_lm.model, default_lm.device, cancelled=after(3))
    assert len(calls) == 4  # three timed forwards, then it stopped
    engine = LlamaCppEngine(gguf_lm, n_ctx=512)
    try:
        calls.clear()
        with pytest.raises(MeasurementCancelled):
            measure_engine(engine, int(gguf_lm.model.n_vocab), cancelled=after(5))
        assert len(calls) == 6
    finally:
        engine.close()


def test_a_session_that_was_stopped_stays_plain_and_keeps_nothing(
    gguf_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from samchat.decoding import DecodingConfig, SamplingParams

    monkeypatch.setattr(LlamaCppMeter, "cached_cost_curve", lambda self: None)  # a new machine
    monkeypatch.setattr(gguf_lm.curves, "curves", {})
    session = ChatSession(gguf_lm, DecodingConfig(), cache_dir=tmp_path, measure_first=False)
    events = list(session.generate([{"role": "user", "content": "Say hi"}], SamplingParams(4)))
    assert events[-1].stats.steps == events[-1].stats.tokens  # plain: one token a step
    assert session.curve_missing
    with pytest.raises(MeasurementCancelled):
        session.measure_cost_curve(lambda: True)
    assert session.curve_missing and not (tmp_path / "costs").exists()
