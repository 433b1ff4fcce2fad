"""A short run of the interruption campaign (scripts/interrupt_campaign.py) with the real default
model: Ctrl-C into `samchat ask` (local and remote) and `samchat serve`, Esc and quit in the app.
Each interrupt is obeyed, no earlier message is lost and the store stays sound. `make faults`
runs the full campaign."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.model


def _campaign() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "samchat_interrupts", ROOT / "scripts" / "interrupt_campaign.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_interrupt_is_obeyed_and_nothing_saved_is_lost(tmp_path: Path) -> None:
    campaign = _campaign()
    figures = campaign.campaign(
        trials=2,
        fronts=campaign.FRONTS,
        seed=11,
        work=tmp_path,
        say=lambda _: None,
    )
    assert [f.front for f in figures] == list(campaign.FRONTS)
    for f in figures:
        assert f.trials == 2 and f.kept == 2, f
        # Ended at all, nothing lost, the store sound, no traceback. The 2 s deadline is the
        # full campaign's figure: a test on a loaded machine only checks that it ended.
        assert f.lost == 0, f.problems
        problems = [p for p in f.problems if "ended" not in p]
        assert problems == [], (f.front, problems)
