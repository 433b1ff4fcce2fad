"""The engines measured in the background for a GGUF file with no record (engine_trial.py), on
the real bundled model copied elsewhere and run by llama.cpp, as the app and serve run it: the
record appears, a wanted() that turns true abandons it between steps (nothing kept, the next
try completes), and a candidate that would not fit in memory is recorded as refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from samchat.engines.costs import MeasurementCancelled
from samchat.engines.memory import use_reading
from samchat.models.engine_choice import STEPS_ENV, kept, refusals, why
from samchat.models.engine_trial import Trial
from samchat.models.loader import ModelSpec

pytestmark = pytest.mark.model


@pytest.fixture(autouse=True)
def few_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STEPS_ENV, "2")


@pytest.fixture(scope="module")
def copy_lm(unmeasured_gguf: Path) -> Iterator[Any]:
    """The copy on llama.cpp, as `auto` loads a GGUF with no record."""
    from samchat.models import load_model

    yield load_model(ModelSpec(source=str(unmeasured_gguf), engine="llamacpp"))


def _nothing(_: str) -> None:
    pass


def test_the_trial_keeps_the_record_and_hands_over_the_faster_engine(
    tmp_path: Path, unmeasured_gguf: Path, copy_lm: Any
) -> None:
    spec = ModelSpec(source=str(unmeasured_gguf))
    trial = Trial.owed(spec, tmp_path, copy_lm)
    assert trial is not None
    assert why(spec, "llamacpp", tmp_path) == "not measured yet: measuring after the first answer"
    result = trial.run(copy_lm, lambda: False, _nothing)
    assert [s.label for s in result.speeds] == ["llamacpp", "flat/int4"] and not result.refused
    assert kept(tmp_path, spec) == result.speeds
    best = result.best
    assert best is not None
    if best.engine == "llamacpp":
        assert result.faster is None
    else:  # the model loaded on the faster engine, ready to take the next reply
        assert result.faster is not None and result.faster.engine == best.engine
    assert why(spec, best.engine, tmp_path).startswith(f"measured fastest here: {best.label} ")
    assert Trial.owed(spec, tmp_path, copy_lm) is None  # kept: nothing owed any more
    trial.close()


def test_a_trial_gives_way_between_steps_and_the_next_try_completes(
    tmp_path: Path, unmeasured_gguf: Path, copy_lm: Any
) -> None:
    """Abandoned, not paused: wanted() is not asked again once it said so, nothing is kept,
    and a later run measures from the start."""
    spec = ModelSpec(source=str(unmeasured_gguf))
    trial = Trial.owed(spec, tmp_path, copy_lm)
    assert trial is not None
    asked: list[bool] = []

    def wanted() -> bool:
        asked.append(len(asked) >= 3)  # a request arrives at the fourth check
        return asked[-1]

    with pytest.raises(MeasurementCancelled):
        trial.run(copy_lm, wanted, _nothing)
    assert asked == [False, False, False, True]
    assert kept(tmp_path, spec) is None and Trial.owed(spec, tmp_path, copy_lm) is not None
    trial.run(copy_lm, lambda: False, _nothing)
    assert kept(tmp_path, spec) is not None
    trial.close()


class _Little:
    """A machine with 1 MiB left: any load beside the running model would not fit."""

    def available(self) -> int | None:
        return 2**20


def test_a_candidate_that_would_not_fit_is_recorded_as_refused(
    tmp_path: Path, unmeasured_gguf: Path, copy_lm: Any
) -> None:
    spec = ModelSpec(source=str(unmeasured_gguf))
    trial = Trial.owed(spec, tmp_path, copy_lm)
    assert trial is not None
    previous = use_reading(_Little())
    try:
        result = trial.run(copy_lm, lambda: False, _nothing)
    finally:
        use_reading(previous)
        trial.close()
    assert [s.label for s in result.speeds] == ["llamacpp"] and result.faster is None
    (refusal,) = refusals(tmp_path, spec)
    assert refusal.engine == "flat" and "memory" in refusal.reason
    note = why(spec, "llamacpp", tmp_path)
    assert note.startswith("measured fastest here: llamacpp ") and "flat/int4 refused" in note


@pytest.mark.parametrize(
    "change",
    [{"engine": "llamacpp"}, {"dtype": "int4"}, {"device": "cuda"}],
    ids=["engine", "dtype", "device"],
)
def test_nothing_is_owed_where_the_user_chose(
    tmp_path: Path, unmeasured_gguf: Path, copy_lm: Any, change: dict[str, str]
) -> None:
    spec = ModelSpec(source=str(unmeasured_gguf), **change)
    assert Trial.owed(spec, tmp_path, copy_lm) is None
    assert why(spec, "llamacpp", tmp_path) == "asked for with --engine/--dtype or config.toml"


def test_doctor_says_why_the_engine_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no record, the engine auto takes and that it is measured after the first answer;
    an engine config.toml pins, that it was asked for."""
    from samchat.commands.doctor import report

    config = tmp_path / "config"
    monkeypatch.setenv("SAMCHAT_CONFIG_DIR", str(config))
    row = dict(report(tmp_path / "data"))["engine (app, serve)"]
    assert row == "llamacpp, not measured yet: measuring after the first answer"
    config.mkdir(exist_ok=True)
    (config / "config.toml").write_text('engine = "flat"\n', encoding="utf-8")
    row = dict(report(tmp_path / "data"))["engine (app, serve)"]
    assert row == "flat, asked for with --engine/--dtype or config.toml"
