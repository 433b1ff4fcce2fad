"""Loading a model in the torch engine's CPU weight formats (`--dtype int4` / `int8`): what
they refuse, and the packed model itself (packed.py does the packing)."""

from __future__ import annotations

from pathlib import Path

from samchat.engines.memory import available_memory, gib
from samchat.engines.weights import WeightOptions, Weights, WeightsRequest
from samchat.errors import ModelLoadError, TooLargeError

# quant.FORMATS and exactness.REQUANTIZED, named here as well: the options are checked before
# torch is imported. int4 holds a GGUF's own numbers; int8 and int4-requantized requantize.
PACKED_DTYPES = ("int4", "int8", "int4-requantized")
# How each is named in messages, the status bar, doctor and bench JSON.
LABELS = {"int4-requantized": "int4 (requantized)"}


def is_packed(options: WeightOptions) -> bool:
    return options.dtype in PACKED_DTYPES


def check_packed_options(options: WeightOptions) -> None:
    """int4 / int8 are the CPU's weight-only formats: refuse what they cannot take."""
    if not is_packed(options):
        return
    if options.device not in ("auto", "cpu"):
        raise ModelLoadError(
            f"--dtype {options.dtype} runs on the CPU; drop --device {options.device} "
            "or use --dtype bfloat16 there"
        )
    if options.quantize or options.cuda_graphs:
        raise ModelLoadError(
            f"--dtype {options.dtype} is a quantized format already; drop --quantize and "
            "--cuda-graphs"
        )


def check_packed_source(request: WeightsRequest) -> None:
    files = request.files
    if not files.local:
        raise ModelLoadError(
            f"--dtype {request.options.dtype} packs a local model; download {files.path} "
            "first (or pass a .gguf file or model directory)"
        )


def refuse_unless_it_fits(request: WeightsRequest) -> None:
    """TooLargeError where the load's estimated peak exceeds the memory available (never where
    either is unknown): the loader then runs the file on llama.cpp, which maps it as it is,
    instead of packing until the kernel kills the process."""
    from samchat.engines.flat.packed import load_need

    files, fmt = request.files, request.options.dtype
    need = load_need(Path(files.location), files.name, fmt, request.cache_dir)
    room = available_memory()
    if need is None or room is None or need[0] <= room:
        return
    doing = "to pack" if need[1] == "pack" else "to load"
    raise TooLargeError(
        f"the flat engine needs about {gib(need[0])} of memory {doing} {files.name} as {fmt}, "
        f"{gib(room)} available"
    )


def load_packed(request: WeightsRequest) -> Weights:
    """A LLaMA-family model in the weight-only int4/int8 format on the CPU: a GGUF file (the
    bundled default too) or a local Hugging Face directory, packed once for this CPU and kept
    in the model cache."""
    import torch

    from samchat.engines.flat.packed import load_lean

    files, fmt = request.files, request.options.dtype
    refuse_unless_it_fits(request)
    request.say(f"loading weights of {files.name} ({fmt} on cpu)")
    model = load_lean(Path(files.location), files.name, fmt, request.cache_dir, request.say)
    return Weights(model=model, device=torch.device("cpu"), dtype=LABELS.get(fmt, fmt))
