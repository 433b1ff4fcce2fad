"""Options shared by several commands: which model, engine and device, where the data lives."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from samchat import paths
from samchat.engines.registry import ENGINES
from samchat.errors import SamchatError
from samchat.models.device import DEVICES, DTYPES
from samchat.models.loader import ModelSpec

if TYPE_CHECKING:
    from samchat.chat.config import Config


def add_model_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    # SUPPRESS: an option given before the sub-command is not reset by the sub-command's default.
    group.add_argument(
        "--model",
        default=argparse.SUPPRESS,
        help="model directory, GGUF file, hub id, ollama:NAME[:TAG], or a model on a server: "
        "openai:URL[#MODEL] or openai:ENDPOINT (default: config.toml's model, else the bundled "
        "SmolLM2-135M-Instruct); `samchat models` lists them",
    )
    group.add_argument(
        "--engine",
        default=argparse.SUPPRESS,
        choices=ENGINES,
        help="default: config.toml's engine, else auto; auto runs a .gguf model (the bundled "
        "default too) with llama.cpp on the CPU when llama-cpp-python is installed, else torch; "
        "flat: the flat engine, a GGUF's own numbers in int4/int8 tiles on the CPU (packed once "
        "for this CPU; `--engine torch --dtype int4` names it too)",
    )
    group.add_argument(
        "--device",
        default=argparse.SUPPRESS,
        choices=DEVICES,
        help="default: config.toml's device, else auto",
    )
    group.add_argument(
        "--dtype",
        default=argparse.SUPPRESS,
        choices=DTYPES,
        help="torch: auto (a GPU: bfloat16 or float16; a CPU: float32), float32, float16, "
        "bfloat16; the flat engine (with any --engine but llamacpp): int4 (its default, a "
        "GGUF's own numbers, every common type), int4-requantized (every linear requantized "
        "to 4 bits), int8 (to 8 bits per row); float32 and the flat engine draft with output "
        "identical to plain decoding",
    )
    group.add_argument(
        "--quantize",
        default=argparse.SUPPRESS,
        choices=("4bit", "8bit"),
        help="bitsandbytes (CUDA only)",
    )
    group.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=argparse.SUPPRESS,
        help="torch on a CUDA GPU: replay decode and verify steps as CUDA graphs (fixed "
        "shapes, the whole context's KV cache allocated up front); on by default where the "
        "model allows it",
    )
    group.add_argument(
        "--trust-remote-code",
        action="store_true",
        default=argparse.SUPPRESS,
        help="run code shipped with the model (off by default)",
    )


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        default=argparse.SUPPRESS,
        help="where chats, documents and the index live (env SAMCHAT_DATA_DIR)",
    )


def apply_data_dir(args: argparse.Namespace) -> Path:
    """Resolve the data directory once: --data-dir wins over SAMCHAT_DATA_DIR, which wins over
    the platform default. It is kept as `args.data_path` and passed down from there (the store
    path, the index next to it): nothing below the commands reads it again."""
    resolved = getattr(args, "data_path", None)
    if isinstance(resolved, Path):
        return resolved
    given = getattr(args, "data_dir", None)
    try:
        if given:
            resolved = Path(given).expanduser()
            paths.private_dir(resolved)
        else:
            resolved = paths.data_dir()
    except OSError as exc:
        where = exc.filename or given or "the data directory"
        raise SamchatError(
            f"cannot use the data directory {where}: {exc.strerror}; pass --data-dir"
        ) from None
    args.data_path = resolved
    return resolved


def store_path(args: argparse.Namespace) -> Path:
    """The database file of the resolved data directory."""
    from samchat.store.store import DB_NAME

    return apply_data_dir(args) / DB_NAME


def spec_from_args(args: argparse.Namespace, config: Config | None = None) -> ModelSpec:
    """The model the command line names; where it names no model, device or engine, config.toml's
    (`config`: the front ends that read it, the app, ask and serve)."""
    base = config.model_spec() if config is not None else ModelSpec()
    # The model options are absent from args unless given (argparse.SUPPRESS). An engine and
    # its format go together: an engine named here takes its dtype from here too (auto).
    engine = getattr(args, "engine", None)
    dtype = getattr(args, "dtype", None) or ("auto" if engine else base.dtype)
    return ModelSpec(
        source=getattr(args, "model", base.source),
        engine=engine or base.engine,
        device=getattr(args, "device", None) or base.device,
        dtype=dtype,
        quantize=getattr(args, "quantize", None),
        trust_remote_code=bool(getattr(args, "trust_remote_code", False)),
        cuda_graphs=getattr(args, "cuda_graphs", None),
    )
