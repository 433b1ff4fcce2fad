"""Loading a model on the flat engine (the registry's hooks for it): what its formats
(`--dtype int4`, `int8`, `int4-requantized`) refuse, and the packed model itself (packed.py
does the packing).

Importing this module imports no torch: the loader checks options before anything heavy."""

from __future__ import annotations

from pathlib import Path

from samchat.engines.memory import available_memory, gib
from samchat.engines.weights import ModelFiles, WeightOptions, Weights, WeightsRequest
from samchat.errors import ModelLoadError, TooLargeError

# The registry's FLAT.dtypes, quant.FORMATS and exactness.REQUANTIZED, named here as well: the
# options are checked before torch is imported. int4 holds a GGUF's own numbers; int8 and
# int4-requantized requantize.
PACKED_DTYPES = ("int4", "int8", "int4-requantized")
DEFAULT_DTYPE = "int4"  # what `--engine flat` runs without a --dtype
# How each is named in messages, the status bar, doctor and bench JSON.
LABELS = {"int4-requantized": "int4 (requantized)"}


def _format(options: WeightOptions) -> str:
    return DEFAULT_DTYPE if options.dtype == "auto" else options.dtype


def check_options(options: WeightOptions) -> None:
    """The flat engine's formats are the CPU's weight-only ones: refuse what they cannot
    take (any other engine's options are that engine's to check)."""
    if options.dtype not in PACKED_DTYPES:
        return
    if options.device not in ("auto", "cpu"):
        raise ModelLoadError(
            f"--dtype {options.dtype} runs on the CPU (the flat engine); drop --device "
            f"{options.device} or use --dtype bfloat16 there"
        )
    if options.quantize or options.cuda_graphs:
        raise ModelLoadError(
            f"--dtype {options.dtype} is a quantized format already; drop --quantize and "
            "--cuda-graphs"
        )


def prepare(request: WeightsRequest) -> ModelFiles:
    """The files as found: a GGUF file, or a local Hugging Face directory to pack."""
    files = request.files
    if not files.local:
        raise ModelLoadError(
            f"the flat engine packs a local model; download {files.path} first (or pass a "
            ".gguf file or model directory)"
        )
    return files


def refuse_unless_it_fits(request: WeightsRequest) -> None:
    """TooLargeError where the load's estimated peak exceeds the memory available (never where
    either is unknown): the loader then runs the file on llama.cpp, which maps it as it is,
    instead of packing until the kernel kills the process."""
    from samchat.engines.flat.packed import load_need

    files, fmt = request.files, _format(request.options)
    need = load_need(Path(files.location), files.name, fmt, request.cache_dir)
    room = available_memory()
    if need is None or room is None or need[0] <= room:
        return
    doing = "to pack" if need[1] == "pack" else "to load"
    raise TooLargeError(
        f"the flat engine needs about {gib(need[0])} of memory {doing} {files.name} as {fmt}, "
        f"{gib(room)} available"
    )


def load_weights(request: WeightsRequest) -> Weights:
    """A llama, qwen2 or qwen3 model in a weight-only int4/int8 format on the CPU: a GGUF file
    (the bundled default too) or a local Hugging Face directory, packed once for this CPU and
    kept in the model cache."""
    import torch

    from samchat.engines.flat.packed import load_flat

    files, fmt = request.files, _format(request.options)
    refuse_unless_it_fits(request)
    request.say(f"loading weights of {files.name} on the flat engine ({fmt} on cpu)")
    model = load_flat(Path(files.location), files.name, fmt, request.cache_dir, request.say)
    return Weights(model=model, device=torch.device("cpu"), dtype=LABELS.get(fmt, fmt))
