"""scripts/gpu_check.py runs on a CPU too (small shapes), so it still works on the day a GPU
machine runs it: real default model, real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.model
def test_gpu_check_runs_on_the_cpu_and_finds_spec_equal_to_plain(tmp_path: Path) -> None:
    """Over a minute on 2 cores, on purpose: the script loads the real model in three
    configurations and measures two cost curves and each engine's kernels, as on a GPU."""
    out = tmp_path / "gpu.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--quick",
         "--json", str(out)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    data = json.loads(out.read_text())
    for name in ("random_1b_curve", "default_model_curve"):
        curve = data[name]
        assert curve["relative_cost"]["1"] == 1.0 and len(curve["relative_cost"]) > 4
        assert curve["kernels"]  # the plan measured with it, in words
    runs = [(e["dtype"], e["steps"]) for e in data["equality"]]
    assert runs == [("bfloat16", "dynamic"), ("float32", "dynamic"), ("float32", "static")]
    assert all(e["tokens_per_s"]["plain"] > 0 for e in data["equality"])
    # float32 promises output identical to plain and keeps it; bfloat16 on a CPU says it may
    # differ (whether it does varies between CPUs), so only its report is checked.
    promised = {(e["dtype"], e["steps"]): e["promised_identical"] for e in data["equality"]}
    assert promised == {runs[0]: False, runs[1]: True, runs[2]: True}
    assert all(e["all_identical"] for e in data["equality"] if e["promised_identical"])
    assert data["equality"][0]["identical"] in ("0/1", "1/1")
    assert all(e["overhead_ms_per_step"] > 0 for e in data["equality"])
    assert data["bitsandbytes_4bit"] == "not checked (needs CUDA)"
    assert "identical to plain 1/1" in proc.stdout
