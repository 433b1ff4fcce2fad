"""A GGUF model as the torch engine reads it (transformers loads no GGUF quickly): de-quantised
once to float32 safetensors with its tokenizer, in a folder the loader names, after a check
that the float32 weights fit in memory."""

from __future__ import annotations

import functools
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from samchat.engines.memory import available_memory, gib
from samchat.engines.weights import Say, quiet_transformers
from samchat.errors import ModelLoadError, one_line


def gguf_parameters(gguf: Path) -> int:
    """How many weights the GGUF file holds (from its tensor table; nothing is de-quantised)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(gguf)
        return sum(int(t.n_elements) for t in reader.tensors)
    except Exception as exc:  # gguf raises ValueError, struct.error, ...: all mean "unreadable"
        raise ModelLoadError(
            f"could not load {gguf}: not a readable GGUF file ({one_line(exc)}); check the file"
        ) from exc


def check_conversion_memory(gguf: Path, name: str) -> None:
    """transformers de-quantises a GGUF to float32: refuse before starting when that cannot fit."""
    need = gguf_parameters(gguf) * 4
    room = available_memory()
    if room is not None and need > room:
        raise ModelLoadError(
            f"{name} needs about {gib(need)} of memory as float32 for the torch engine, "
            f"but only {gib(room)} is available; run it with --engine llamacpp"
        )


def is_converted(path: Path) -> bool:
    weights = (path / "model.safetensors").is_file() or (
        path / "model.safetensors.index.json"
    ).is_file()
    return (path / "config.json").is_file() and weights


def _quiet_gguf_conversion() -> None:
    """GGUF de-quantisation draws its own tqdm bar on stderr, which disable_progress_bar() does
    not reach."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None and not isinstance(bar, functools.partial):
        gguf_utils.tqdm = functools.partial(bar, disable=True)


def convert_gguf(
    gguf: Path,
    target: Path,
    say: Say,
    name: str | None = None,
    trust_remote_code: bool = False,
    save_tokenizer: Callable[[Path], None] | None = None,
) -> Path:
    """`target`, holding the GGUF file's model as float32 safetensors and its tokenizer:
    converted now unless a whole copy is there. Processes converting the same target take
    turns under a file lock beside it; the second finds the first's copy. save_tokenizer
    writes the tokenizer into a folder (None: transformers converts the GGUF's)."""
    name = name or gguf.name
    if is_converted(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.parent / f".{target.name}.lock"):
        if is_converted(target):
            return target
        check_conversion_memory(gguf, name)
        say(f"converting {name} from GGUF for the torch engine (once)")
        quiet_transformers()
        _quiet_gguf_conversion()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
        try:
            if save_tokenizer is not None:
                save_tokenizer(tmp)
            else:
                AutoTokenizer.from_pretrained(
                    gguf.parent,
                    gguf_file=gguf.name,
                    trust_remote_code=trust_remote_code,
                    local_files_only=True,
                ).save_pretrained(tmp)
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent,
                gguf_file=gguf.name,
                dtype=torch.float32,
                trust_remote_code=trust_remote_code,
            )
            # The de-quantised weights are plain fp32: drop the GGUF quantizer marker so
            # transformers agrees to save them.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(tmp)
            del model
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)  # atomic: a half-written copy is never taken for a whole one
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(
                f"could not convert {name} for the torch engine: {one_line(exc)}; "
                "try --engine llamacpp"
            ) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
