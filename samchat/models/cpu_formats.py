"""Loading a model in the torch engine's CPU weight formats (`--dtype int4` / `int8`): what
they refuse, and the packed model itself (samchat.engines.torch.packed does the packing)."""

from __future__ import annotations

from pathlib import Path

from samchat.errors import ModelLoadError
from samchat.models.device import WEIGHT_FORMATS
from samchat.models.loader import (
    LoadedModel,
    ModelSpec,
    Progress,
    _chat_tokenizer,
    _eos_ids,
    _gguf_path,
    _remember,
    _resolve_source,
    tokenizer_fingerprint,
)
from samchat.paths import model_cache_dir


def packed_needs_cpu(spec: ModelSpec) -> None:
    """int4 / int8 are the CPU's weight-only formats: refuse what they cannot take."""
    if spec.dtype not in WEIGHT_FORMATS:
        return
    if spec.device not in ("auto", "cpu"):
        raise ModelLoadError(
            f"--dtype {spec.dtype} runs on the CPU; drop --device {spec.device} "
            "or use --dtype bfloat16 there"
        )
    if spec.quantize or spec.cuda_graphs:
        raise ModelLoadError(
            f"--dtype {spec.dtype} is a quantized format already; drop --quantize and --cuda-graphs"
        )


def load_packed(spec: ModelSpec, say: Progress, recent: Path | None) -> LoadedModel:
    """A LLaMA-family model in the torch engine's weight-only int4/int8 format on the CPU:
    a GGUF file (the bundled default too) or a local Hugging Face directory, packed once for
    this CPU and kept in the model cache."""
    import torch

    from samchat.engines.torch.packed import load_lean

    where = _resolve_source(spec, say, native_gguf=True)
    if not where.local:
        raise ModelLoadError(
            f"--dtype {spec.dtype} packs a local model; download {spec.source} first "
            "(or pass a .gguf file or model directory)"
        )
    tokenizer = _chat_tokenizer(where, spec, say)
    path = _gguf_path(where) or Path(where.path)
    say(f"loading weights of {where.name} ({spec.dtype} on cpu)")
    model = load_lean(path, where.name, spec.dtype, model_cache_dir(), say)
    if where.gguf_file:
        _remember(spec, recent)
    say("model ready")
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device=torch.device("cpu"),
        name=where.name,
        fingerprint=tokenizer_fingerprint(tokenizer),
        eos_ids=_eos_ids(None, tokenizer),
        source=spec.source or str(path),
        dtype=spec.dtype,
    )
