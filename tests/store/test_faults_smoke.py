"""A small run of the fault-injection campaign (scripts/faults.py), so CI exercises the script:
kills on every write path, corruption of database pages and index segments, a full disk and
concurrent writers. `make faults` runs the full campaign."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _faults() -> ModuleType:
    spec = importlib.util.spec_from_file_location("samchat_faults", ROOT / "scripts" / "faults.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_campaign_small_run_loses_nothing(tmp_path: Path) -> None:
    faults = _faults()
    figures = faults.campaign(
        kills=8,
        corruptions=18,
        real_asks=0,
        disk_runs=2,
        writer_rounds=1,
        seed=7,
        work=tmp_path,
        real_cli=False,  # the real CLI loads the model's tokenizer: the full campaign does that
    )
    by_name = {f.scenario.split(":")[0]: f for f in figures}
    assert {"import", "ask", "tui", "index", "corruption", "full disk"} <= set(by_name)
    for f in figures:
        assert f.injected > 0, f.scenario
        assert f.lost == 0, (f.scenario, f.problems)
        if f.scenario.startswith("corruption"):
            assert f.detected + f.harmless + f.silent == f.injected
            assert f.over_page_bound == 0, f.problems
            assert f.recovered >= f.detected - len(f.problems)
        else:
            assert f.committed > 0, f.scenario
            assert f.recovered == f.injected, (f.scenario, f.problems)
    table = faults.markdown(figures)
    assert table.count("\n") == len(figures) + 2
