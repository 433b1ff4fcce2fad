"""The done-when check end to end: the real CLI, the real default tokenizer, real files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LICENSES = Path("/usr/share/common-licenses")


def _samchat(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "samchat", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.model
def test_import_then_search_and_index(tmp_path: Path) -> None:
    # Debian's license texts when the machine has them, else samchat's own corpus pack.
    source, query, expect = (
        (LICENSES, "warranty", "GPL-3")
        if LICENSES.is_dir()
        else (ROOT / "samchat" / "corpora", "automata", "README.md")
    )
    # Symlinks (GPL -> GPL-3) name the same file once.
    n_files = len({p.resolve() for p in source.rglob("*") if p.is_file() and p.name[0] != "."})
    data = ["--data-dir", str(tmp_path)]
    imported = _samchat("import", str(source), *data)
    assert imported.returncode == 0, imported.stderr
    assert "docs/s" in imported.stderr and "tokens/s" in imported.stderr
    assert "bytes/token" in imported.stderr

    found = _samchat("search", query, "-n", "50", *data)
    assert found.returncode == 0, found.stderr
    assert expect in found.stdout and query in found.stdout.lower()

    status = _samchat("index", "status", *data)
    assert status.returncode == 0, status.stderr
    assert "synced" not in status.stdout  # the import left nothing for the index to catch up
    docs = [ln for ln in status.stdout.splitlines() if ln.startswith("holds")]
    assert docs and f"holds      {n_files} items" in docs[0]

    again = _samchat("import", str(source), *data)
    assert "imported 0 documents" in again.stderr and f"{n_files} already imported" in again.stderr
