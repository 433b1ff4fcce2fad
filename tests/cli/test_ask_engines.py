"""`samchat ask` on either engine: --engine wins over config.toml's engine, which wins over auto.
The real default model (torch: its converted safetensors copy; llama.cpp: the bundled Q4_1
GGUF), greedy, plain decoding, a few tokens."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat import paths
from samchat.cli import main

pytestmark = pytest.mark.model

TORCH = "[loading weights of SmolLM2-135M-Instruct"  # the loaders' progress lines on stderr
LLAMACPP = "with llama.cpp]"


def ask(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, str]:
    args = ["ask", "Name a colour.", "--max-new-tokens", "4", "--method", "plain", "--no-save"]
    assert main([*args, "--data-dir", str(tmp_path), *extra]) == 0
    out, err = capsys.readouterr()
    assert out.strip(), err  # an answer
    return out, err


def test_ask_answers_on_the_engine_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = paths.config_dir() / "config.toml"
    config.write_text('engine = "torch"\n')
    _, err = ask(tmp_path, capsys, "--engine", "llamacpp")  # the flag wins over config.toml
    assert LLAMACPP in err and TORCH not in err
    _, err = ask(tmp_path, capsys)  # no flag: config.toml's engine
    assert TORCH in err and LLAMACPP not in err
    config.write_text('engine = "llamacpp"\n')
    _, err = ask(tmp_path, capsys, "--engine", "torch")
    assert TORCH in err and LLAMACPP not in err
