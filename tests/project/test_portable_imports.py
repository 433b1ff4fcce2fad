"""samchat runs where POSIX-only modules are missing (Windows has no fcntl), and the default
model's conversion lock still lets one process convert while the others wait."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from filelock import FileLock

from samchat.engines.torch.conversion import convert_gguf
from samchat.models import default

WITHOUT_FCNTL = """
import sys
sys.modules["fcntl"] = None  # `import fcntl` now raises ImportError, as on Windows
import samchat.cli
import samchat.models.default
import samchat.sam
try:
    code = samchat.cli.main(["--help"])  # imports every command module
except SystemExit as exc:
    code = exc.code
print("exit", code)
"""


def test_cli_imports_without_fcntl() -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_FCNTL],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "usage: samchat" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "exit 0"


def test_conversion_waits_for_the_lock_then_uses_the_finished_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(tmp_path))
    target = default.converted_dir()
    progress: list[str] = []
    result: list[Path] = []

    def convert() -> None:
        result.append(convert_gguf(tmp_path / "model.gguf", target, progress.append))

    # Another process holds the lock while it converts (beside the target, as conversion.py).
    with FileLock(tmp_path / f".{default.DEFAULT_MODEL_NAME}.lock"):
        waiter = threading.Thread(target=convert, daemon=True)
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive(), "convert_gguf did not wait for the lock"
        target.mkdir()
        (target / "config.json").write_text("{}")
        (target / "model.safetensors").write_bytes(b"")
    waiter.join(30)
    assert not waiter.is_alive()
    assert result == [target]
    assert progress == []  # it saw the finished copy and converted nothing
