"""Loading weights for the torch engine (the registry's hooks for it): the options it refuses, a
GGUF model converted once, and a Hugging Face model on its device in its dtype, quantized by
bitsandbytes when asked; `--dtype int4/int8` goes to packed_loading.py.

Importing this module imports no torch: the loader checks options before anything heavy."""

from __future__ import annotations

from typing import Any

from samchat.engines.flat.loading import (
    check_packed_options,
    check_packed_source,
    is_packed,
    load_packed,
)
from samchat.engines.weights import (
    ModelFiles,
    WeightOptions,
    Weights,
    WeightsRequest,
    quiet_transformers,
)
from samchat.errors import ModelLoadError, one_line
from samchat.names import StepMode


def _cuda_graphs_need_cuda(options: WeightOptions, device_type: str) -> None:
    if options.cuda_graphs and device_type != "cuda":
        raise ModelLoadError(
            f"--cuda-graphs needs a CUDA GPU and this run uses {device_type}; drop --cuda-graphs"
        )


def _quantization_config(options: WeightOptions, device_type: str) -> Any:
    """bitsandbytes' config for --quantize (None without it); refuses before importing
    anything where it cannot run."""
    if options.quantize is None:
        return None
    if options.quantize not in ("4bit", "8bit"):
        raise ModelLoadError(f"unknown --quantize {options.quantize!r}; use 4bit or 8bit")
    if device_type != "cuda":
        raise ModelLoadError(
            f"--quantize {options.quantize} needs a CUDA GPU (bitsandbytes); "
            "drop --quantize or run on a machine with CUDA"
        )
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as exc:
        raise ModelLoadError(
            "--quantize needs bitsandbytes; install it with: pip install 'samchat[cuda]'"
        ) from exc
    import torch
    from transformers import BitsAndBytesConfig

    if options.quantize == "4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    return BitsAndBytesConfig(load_in_8bit=True)


def check_options(options: WeightOptions) -> None:
    """What is wrong with the options that needs no torch to tell: int4/int8 elsewhere than
    the CPU, or CUDA-only options on a named CPU or Mac GPU."""
    check_packed_options(options)
    if options.device in ("cpu", "mps"):
        _cuda_graphs_need_cuda(options, options.device)
        _quantization_config(options, options.device)


def requested_steps(options: WeightOptions, device_type: str) -> StepMode:
    """How the torch engine should run its steps (TorchEngine's `steps`): "graphs" when asked,
    "auto" (graphs if the model's cache allows them) by default on CUDA for unquantized weights
    (bitsandbytes layers are not checked under capture), else "dynamic"."""
    if options.cuda_graphs:
        return "graphs"
    if options.cuda_graphs is None and device_type == "cuda" and not options.quantize:
        return "auto"
    return "dynamic"


def prepare(request: WeightsRequest) -> ModelFiles:
    """The files the torch engine reads: a GGUF model converted once into request.converted
    (after the device, dtype and quantization are checked, so a wrong one costs no
    conversion); int4/int8 read the GGUF file or directory as they are."""
    options = request.options
    if is_packed(options):
        check_packed_source(request)
        return request.files
    from samchat.engines.torch.placement import resolve_device, resolve_dtype

    device = resolve_device(options.device)
    _cuda_graphs_need_cuda(options, device.type)
    resolve_dtype(options.dtype, device)
    _quantization_config(options, device.type)
    files = request.files
    if files.gguf is None:
        return files
    if request.converted is None:
        raise ValueError("a GGUF model for the torch engine needs a folder to convert it into")
    from samchat.engines.torch.conversion import convert_gguf

    target = convert_gguf(
        files.gguf,
        request.converted,
        request.say,
        name=files.name,
        trust_remote_code=options.trust_remote_code,
        save_tokenizer=request.save_tokenizer,
    )
    return ModelFiles(str(target), None, files.name, True)


def _generation_eos(model: Any) -> tuple[int, ...]:
    """The end ids a Hugging Face model's generation config names (an id or a list)."""
    value = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(value, int):
        return (value,)
    if isinstance(value, list | tuple):
        return tuple(int(v) for v in value)
    return ()


def load_weights(request: WeightsRequest) -> Weights:
    """The model of request.files (prepared: a directory or hub id) on its device, or packed
    for the CPU with --dtype int4/int8."""
    options, files = request.options, request.files
    if is_packed(options):
        return load_packed(request)
    from samchat.engines.torch.placement import resolve_device, resolve_dtype

    quiet_transformers()
    device = resolve_device(options.device)
    dtype = resolve_dtype(options.dtype, device)
    quant = _quantization_config(options, device.type)
    request.say(f"loading weights of {files.name} ({dtype} on {device})")
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": options.trust_remote_code}
    if files.local:
        kwargs["local_files_only"] = True
    if quant is not None:
        kwargs["quantization_config"] = quant
        kwargs["device_map"] = {"": device.index or 0}
    try:
        model = AutoModelForCausalLM.from_pretrained(files.path, **kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load {files.path}: {one_line(exc)}; "
            "check the file or choose another model with --model"
        ) from exc
    if quant is None:
        model = model.to(device)
    model.eval()
    return Weights(
        model=model,
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        steps=requested_steps(options, device.type),
        eos_ids=_generation_eos(model),
    )
