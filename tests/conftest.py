"""Shared fixtures. The real default model is loaded once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# Tests never reach a model hub; the converted default model is shared between runs.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if "SAMCHAT_MODEL_CACHE" not in os.environ:
    from platformdirs import user_cache_dir

    os.environ["SAMCHAT_MODEL_CACHE"] = str(Path(user_cache_dir("samchat")) / "models")


@pytest.fixture(autouse=True)
def _isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test writes its data, cache and config under its own temporary directory."""
    base = tmp_path_factory.mktemp("samchat-home")
    for name in ("DATA", "CACHE", "CONFIG"):
        monkeypatch.setenv(f"SAMCHAT_{name}_DIR", str(base / name.lower()))


@pytest.fixture(scope="session")
def default_lm() -> Iterator[object]:
    """The real default model (SmolLM2-135M-Instruct), loaded once."""
    from samchat.models import load_model

    yield load_model()
