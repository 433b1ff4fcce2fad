"""`--dtype auto` on the torch engine: float32 against bfloat16 measured once per machine and
model on the real default model, the verdict cached, the weights converted, output lossless."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from samchat import paths
from samchat.decoding import ChatSession, DecodingConfig, SamplingParams, TextDelta
from samchat.engines import dtype_fit, open_engine
from samchat.models import load_model
from samchat.models.loader import ModelSpec
from tests.decoding.prompts import MULTI_TURN, SINGLE_TURN

pytestmark = pytest.mark.model


def _auto_lm() -> Any:
    lm = load_model(ModelSpec(engine="torch"))  # --dtype auto
    assert lm.auto_dtype and lm.dtype == "float32"
    return lm


def _replies(lm: Any, method: str, cache: Path) -> list[list[int]]:
    params = SamplingParams(max_new_tokens=40, temperature=0.0)
    out = []
    for turns in [[p] for p in SINGLE_TURN[:3]] + [list(MULTI_TURN[0])]:
        session = ChatSession(lm, DecodingConfig(method=method), cache_dir=cache)
        messages: list[dict[str, str]] = []
        for turn in turns:
            messages.append({"role": "user", "content": turn})
            events = list(session.generate(messages, params))
            out.append([t for e in events if isinstance(e, TextDelta) for t in e.token_ids])
            text = "".join(e.text for e in events if isinstance(e, TextDelta))
            messages.append({"role": "assistant", "content": text})
    return out


def _weights_dtype(lm: Any) -> str:
    return str(next(lm.model.parameters()).dtype).removeprefix("torch.")


def test_auto_dtype_is_measured_once_cached_and_lossless(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU's flags are taken as having bfloat16 kernels, so the measurement runs on any
    machine (where they are missing bfloat16 is emulated, slow, and loses)."""
    from samchat.commands import doctor

    monkeypatch.setattr(dtype_fit, "cpu_flags", lambda: ["avx512_bf16"])
    monkeypatch.setattr(dtype_fit, "_VERDICTS", {})
    cache = paths.cache_dir()
    lm = _auto_lm()
    engine = open_engine(lm, cache)
    [saved] = (cache / "dtype").glob("*.json")
    data = json.loads(saved.read_text())
    chosen = data["dtype"]
    assert chosen == lm.dtype == _weights_dtype(lm) == str(engine.dtype).removeprefix("torch.")
    assert set(data["step_ms"]) == {"float32", "bfloat16"}
    assert all(ms > 0 for ms in data["step_ms"].values())
    expected = data["expected"]
    assert expected["float32"] > 0
    assert (chosen == "bfloat16") == (expected["bfloat16"] > dtype_fit.MARGIN * expected["float32"])
    assert lm.dtype_verdict.startswith(chosen) and not lm.auto_dtype
    assert data["about"]["model"] == lm.name and data["about"]["torch"] == torch.__version__
    rows = dict(doctor.report())
    assert rows[f"torch dtype (auto, {lm.name})"] == lm.dtype_verdict

    # Lossless in whichever dtype was taken: drafts give plain decoding's tokens.
    assert _replies(lm, "sam+tr", cache) == _replies(lm, "plain", cache)

    # Another process (an empty memo) takes the cached verdict: no measurement, same weights.
    monkeypatch.setattr(dtype_fit, "_VERDICTS", {})

    def no_measuring(*_: Any) -> Any:
        raise RuntimeError("measured again")

    monkeypatch.setattr(dtype_fit, "_measure", no_measuring)
    again = _auto_lm()
    open_engine(again, cache)
    assert again.dtype == _weights_dtype(again) == chosen
    assert again.dtype_verdict == lm.dtype_verdict

    # An unreadable verdict is measured again rather than trusted or fatal.
    saved.write_text("{ not json")
    monkeypatch.setattr(dtype_fit, "_VERDICTS", {})
    with pytest.raises(RuntimeError, match="measured again"):
        open_engine(_auto_lm(), cache)


def test_auto_dtype_stays_float32_without_bf16_kernels_or_when_pinned(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(dtype_fit, "_VERDICTS", {})
    cache = paths.cache_dir()
    from samchat.commands import doctor

    rows = dict(doctor.report())
    monkeypatch.setattr(dtype_fit, "cpu_flags", lambda: ["avx2", "fma"])
    lm = _auto_lm()
    assert open_engine(lm, cache).dtype == torch.float32
    assert lm.dtype == "float32" and lm.dtype_verdict == "" and not (cache / "dtype").exists()
    assert "torch dtype (auto)" in rows  # nothing measured yet: doctor says what auto will do

    monkeypatch.setattr(dtype_fit, "cpu_flags", lambda: ["avx512_bf16"])
    pinned = load_model(ModelSpec(engine="torch", dtype="float32"))
    assert not pinned.auto_dtype
    assert open_engine(pinned, cache).dtype == torch.float32
    assert not (cache / "dtype").exists()
