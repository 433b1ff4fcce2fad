"""Loading causal LMs: the offline default model, local directories, GGUF files and hub ids."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from samchat.engines.registry import (
    AUTO,
    DEFAULT,
    ENGINES,
    EngineKind,
    engine_kind,
    native_gguf_kind,
)
from samchat.errors import ModelLoadError
from samchat.models.catalog import (
    OLLAMA_PREFIX,
    cached_snapshot,
    hf_hub_cache,
    is_gguf,
    remember_gguf,
    resolve_ollama,
)
from samchat.models.default import DEFAULT_MODEL_NAME, bundled_gguf, default_model_dir
from samchat.models.device import (
    WEIGHT_FORMATS,
    accelerator_possible,
    available_memory,
    resolve_device,
    resolve_dtype,
)
from samchat.models.gguf_header import metadata_digest
from samchat.models.kept_tokenizer import KeptTokenizer
from samchat.names import StepMode

if TYPE_CHECKING:
    import torch

    from samchat.decoding.protocols import Tokenizer
from samchat.paths import model_cache_dir
from samchat.remote.endpoint import is_remote

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ModelSpec:
    """What to load. `source` None means the bundled SmolLM2-135M-Instruct."""

    source: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    quantize: str | None = None
    trust_remote_code: bool = False
    engine: str = "auto"  # samchat.engines.registry.ENGINES
    # torch on CUDA: steps replayed as CUDA graphs (graphs.py); None: wherever they can run
    # (unquantized weights on CUDA with a uniform KV cache), since an eager step there is
    # mostly kernel launches (docs/benchmarks.md, "On a GPU").
    cuda_graphs: bool | None = None


@dataclass
class LoadedModel:
    """A model ready for decoding: a samchat.decoding SessionModel (and EngineModel)."""

    # The weights as its engine runs them (a transformers model, or llama.cpp's LlamaWeights):
    # only that engine reads them, through its own package.
    model: Any
    tokenizer: Tokenizer  # transformers' tokenizer, or the GGUF's kept one
    device: torch.device | str  # "cpu" for llama.cpp
    name: str
    fingerprint: str
    eos_ids: tuple[int, ...]
    source: str = ""
    dtype: str = ""
    engine: str = "torch"  # the registry's name of the engine that runs `model`
    # How the torch engine runs decode and verify steps (TorchEngine's `steps`).
    steps: StepMode = "dynamic"

    @property
    def device_type(self) -> str:
        """ "cpu", "cuda" or "mps": where the model runs."""
        return str(getattr(self.device, "type", self.device))

    @property
    def kind(self) -> EngineKind:
        return engine_kind(self.engine)

    @property
    def context_limit(self) -> int:
        return self.kind.context_limit(self.model)

    @property
    def vocab_size(self) -> int:
        return self.kind.vocab_size(self.model)


def _noop(_: str) -> None:
    pass


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


@dataclass(frozen=True)
class _Resolved:
    """A concrete place to load from: a directory plus an optional GGUF file name in it."""

    path: str
    gguf_file: str | None
    name: str
    local: bool


def _refuse_missing_path(src: str) -> None:
    """A source written as a path (not a hub id) that is not there."""
    looks_like_path = src.startswith((".", "/", "~")) or src.endswith(".gguf") or src.count("/") > 1
    if looks_like_path and not Path(src).expanduser().exists():
        raise ModelLoadError(f"model path {src} does not exist; check the path or pass a hub id")


def _offline_snapshot(src: str) -> Path:
    """Offline, a hub id loads from its snapshot directory in the local Hugging Face cache."""
    snapshot = cached_snapshot(src)
    if snapshot is None:
        raise ModelLoadError(
            f"{src} is not a local path nor in the Hugging Face cache ({hf_hub_cache()}) "
            "and HF_HUB_OFFLINE is set; unset it to download, or pass a local model "
            "directory or .gguf file (see `samchat models`)"
        )
    return snapshot


def _refuse_before_torch(spec: ModelSpec) -> None:
    """What is wrong with spec that needs no torch to tell, so that a typo is answered at once
    rather than after importing it: a missing path, or CUDA-only options on a named CPU."""
    source = spec.source
    if source and not source.startswith(OLLAMA_PREFIX):
        _refuse_missing_path(source)
        if _offline() and not Path(source).expanduser().exists():
            _offline_snapshot(source)
    from samchat.models.cpu_formats import packed_needs_cpu

    packed_needs_cpu(spec)
    if spec.device in ("cpu", "mps"):
        _cuda_graphs_need_cuda(spec, spec.device)
        _quantization_config(spec, spec.device)  # refuses before it imports anything


def _cuda_graphs_need_cuda(spec: ModelSpec, device_type: str) -> None:
    if spec.cuda_graphs and device_type != "cuda":
        raise ModelLoadError(
            f"--cuda-graphs needs a CUDA GPU and this run uses {device_type}; drop --cuda-graphs"
        )


def _resolve_source(spec: ModelSpec, progress: Progress, native_gguf: bool = False) -> _Resolved:
    """native_gguf: for an engine that runs GGUF files as they are (the bundled one too)."""
    if spec.source is None:
        if native_gguf:  # the bundled GGUF as it is: no conversion
            gguf = bundled_gguf()
            return _Resolved(str(gguf.parent), gguf.name, DEFAULT_MODEL_NAME, True)
        return _Resolved(str(default_model_dir(progress)), None, DEFAULT_MODEL_NAME, True)
    src = spec.source
    if src.startswith(OLLAMA_PREFIX):
        blob = resolve_ollama(src)
        if not is_gguf(blob):
            raise ModelLoadError(
                f"{src} is not a GGUF model in Ollama's store ({blob}); samchat runs GGUF models"
            )
        return _Resolved(str(blob.parent), blob.name, src.removeprefix(OLLAMA_PREFIX), True)
    path = Path(src).expanduser()
    if path.is_file():
        if not is_gguf(path):  # by its header: an Ollama blob has no .gguf suffix
            raise ModelLoadError(
                f"{src} is not a GGUF file (no GGUF header); pass a model directory, "
                "a GGUF file or a hub id"
            )
        return _Resolved(str(path.parent), path.name, path.name.removesuffix(".gguf"), True)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"{src} has no config.json; pass a Hugging Face model directory, "
                "a .gguf file or a hub id"
            )
        return _Resolved(str(path), None, path.name, True)
    _refuse_missing_path(src)
    if _offline():
        snapshot = _offline_snapshot(src)
        return _Resolved(str(snapshot), None, src.rsplit("/", 1)[-1], True)
    return _Resolved(src, None, src.rsplit("/", 1)[-1], False)


def _gguf_path(where: _Resolved) -> Path | None:
    return Path(where.path) / where.gguf_file if where.gguf_file else None


def _conversion_key(gguf: Path) -> str:
    """A converted copy is keyed by the file's identity: where it is, its size and mtime."""
    stat = gguf.stat()
    ident = f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def gguf_parameters(gguf: Path) -> int:
    """How many weights the GGUF file holds (from its tensor table; nothing is de-quantised)."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(gguf)
        return sum(int(t.n_elements) for t in reader.tensors)
    except Exception as exc:  # gguf raises ValueError, struct.error, ...: all mean "unreadable"
        raise ModelLoadError(
            f"could not load {gguf}: not a readable GGUF file ({_short(exc)}); check the file"
        ) from exc


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_conversion_memory(gguf: Path, name: str) -> None:
    """transformers de-quantises a GGUF to float32: refuse before starting when that cannot fit."""
    need = gguf_parameters(gguf) * 4
    room = available_memory()
    if room is not None and need > room:
        raise ModelLoadError(
            f"{name} needs about {_gib(need)} of memory as float32 for the torch engine, "
            f"but only {_gib(room)} is available; run it with --engine llamacpp"
        )


def _is_converted(path: Path) -> bool:
    weights = (path / "model.safetensors").is_file() or (
        path / "model.safetensors.index.json"
    ).is_file()
    return (path / "config.json").is_file() and weights


def converted_gguf(where: _Resolved, spec: ModelSpec, say: Progress) -> _Resolved:
    """The torch engine runs a GGUF model from a copy converted once (float32 safetensors in the
    model cache, keyed by the file's identity), as it runs the default model."""
    gguf = _gguf_path(where)
    assert gguf is not None
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in where.name)[:60]
    target = model_cache_dir() / f"gguf-{safe}-{_conversion_key(gguf)}"
    if _is_converted(target):
        return _Resolved(str(target), None, where.name, True)
    check_conversion_memory(gguf, where.name)
    with FileLock(model_cache_dir() / f".{target.name}.lock"):
        if _is_converted(target):
            return _Resolved(str(target), None, where.name, True)
        say(f"converting {where.name} from GGUF for the torch engine (once)")
        import torch
        from transformers import AutoModelForCausalLM

        tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=model_cache_dir()))
        try:
            tokenizer = _load_tokenizer(where, spec)
            model = AutoModelForCausalLM.from_pretrained(
                where.path,
                gguf_file=where.gguf_file,
                dtype=torch.float32,
                trust_remote_code=spec.trust_remote_code,
            )
            # The de-quantised weights are plain fp32: drop the GGUF quantizer marker so
            # transformers agrees to save them.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            del model
            if target.exists():
                shutil.rmtree(target)
            tmp.rename(target)  # atomic: a half-written copy is never taken for a whole one
        except ModelLoadError:
            raise
        except Exception as exc:
            raise ModelLoadError(
                f"could not convert {where.name} for the torch engine: {_short(exc)}; "
                "try --engine llamacpp"
            ) from exc
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _Resolved(str(target), None, where.name, True)


def _remember(spec: ModelSpec, recent: Path | None) -> None:
    """A GGUF file the user named is offered again by `samchat models` and the model picker
    (listed in `recent`; None: not remembered)."""
    if recent is not None and spec.source and not spec.source.startswith(OLLAMA_PREFIX):
        path = Path(spec.source).expanduser()
        if path.is_file():
            remember_gguf(path, recent)


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A stable hash of the vocabulary and special tokens: it keys the static index."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256()
    digest.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode())
    digest.update(json.dumps(sorted(map(str, tokenizer.all_special_tokens))).encode())
    return digest.hexdigest()[:16]


def tokenizer_cache(gguf: Path) -> Path:
    """Where a GGUF file's tokenizer is kept once converted: keyed by the file's identity and by
    the libraries that convert and read it (another version may build it differently)."""
    from importlib.metadata import version

    libs = f"{version('transformers')}|{version('tokenizers')}"
    key = hashlib.sha256(f"{_conversion_key(gguf)}|{libs}".encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in gguf.stem)[:60]
    return model_cache_dir() / f"tokenizer-{safe}-{key}"


def _load_tokenizer(where: _Resolved, spec: ModelSpec) -> Any:
    """The model's tokenizer. A GGUF file's is converted from its vocabulary once (seconds, by
    transformers) and kept in the model cache, from where it loads in milliseconds without
    transformers (KeptTokenizer)."""
    gguf = _gguf_path(where)
    cached = tokenizer_cache(gguf) if gguf is not None else None
    same: Path | None = None
    if cached is not None and gguf is not None:
        for folder in (gguf_tokenizer_beside(cached, gguf), cached):
            kept = _read_kept(folder) if folder.is_dir() else None
            if kept is not None:
                return kept
        # A copy of a file converted before (moved, linked, touched, or the same model in
        # Ollama's store and LM Studio's folder): its metadata, so its tokenizer, is the same.
        same = _metadata_tokenizer(gguf)
        kept = _read_kept(same) if same is not None and same.is_dir() else None
        if kept is not None:
            shutil.rmtree(cached, ignore_errors=True)  # a damaged copy, if any
            _keep_tokenizer(kept, cached)  # found by its path from the next start on
            return kept
    _quiet_transformers()
    from transformers import AutoTokenizer

    if cached is not None and cached.is_dir():
        try:
            return AutoTokenizer.from_pretrained(cached, local_files_only=True)
        except Exception:  # a damaged copy is converted again
            shutil.rmtree(cached, ignore_errors=True)
    kwargs: dict[str, Any] = {"trust_remote_code": spec.trust_remote_code}
    if where.gguf_file:
        kwargs["gguf_file"] = where.gguf_file
    if where.local:
        kwargs["local_files_only"] = True
    try:
        tokenizer = AutoTokenizer.from_pretrained(where.path, **kwargs)
    except Exception as exc:  # transformers raises many types; all mean "cannot load"
        raise ModelLoadError(
            f"could not load the tokenizer of {spec.source or where.name}: {_short(exc)}"
        ) from exc
    if cached is not None:
        _keep_tokenizer(tokenizer, cached)
        if same is not None:
            _keep_tokenizer(tokenizer, same)
        # From the kept copy, as every later start reads it: one tokenizer whatever the start.
        return _read_kept(cached) or tokenizer
    return tokenizer


def _metadata_tokenizer(gguf: Path) -> Path | None:
    """Where the tokenizer of any GGUF file with this one's metadata is kept (None: the header
    is unreadable, and converting will say why)."""
    from importlib.metadata import version

    try:
        digest = metadata_digest(gguf)
    except ModelLoadError:
        return None
    libs = f"{version('transformers')}|{version('tokenizers')}"
    key = hashlib.sha256(f"{digest}|{libs}".encode()).hexdigest()[:16]
    return model_cache_dir() / f"tokenizer-metadata-{key}"


def gguf_tokenizer_beside(cached: Path, gguf: Path) -> Path:
    """Where `make setup` keeps the bundled GGUF's converted tokenizer: beside the file, under
    the cache's name for it (so the same file, size, mtime and libraries), so that a first
    start converts nothing."""
    return gguf.parent / cached.name


def keep_bundled_tokenizer() -> Path:
    """Convert the bundled default GGUF's tokenizer and keep it beside the file (make setup)."""
    from samchat.models.default import bundled_gguf

    gguf = bundled_gguf()
    target = gguf_tokenizer_beside(tokenizer_cache(gguf), gguf)
    if not target.is_dir():
        tokenizer, _ = load_tokenizer(ModelSpec(source=str(gguf)))
        _keep_tokenizer(tokenizer, target)
    return target


def _read_kept(folder: Path) -> KeptTokenizer | None:
    """A kept tokenizer through `tokenizers` alone, or None where transformers must read it."""
    try:
        return KeptTokenizer.load(folder)
    except Exception:  # unreadable or unusual (tokenizers raises its own types): transformers
        return None


def _keep_tokenizer(tokenizer: Any, target: Path) -> None:
    """Save a converted tokenizer whole or not at all (a read-only cache converts every time)."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=target.parent))
        try:
            tokenizer.save_pretrained(tmp)
            tmp.rename(target)  # atomic; another process may have kept its copy first
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError:
        pass


def _chat_tokenizer(where: _Resolved, spec: ModelSpec, say: Progress) -> Any:
    """The tokenizer, which must carry a chat template (both engines render prompts with it)."""
    say(f"loading tokenizer of {where.name}")
    tokenizer = _load_tokenizer(where, spec)
    if not getattr(tokenizer, "chat_template", None):
        where_defined = (
            "its metadata must define tokenizer.chat_template"
            if where.gguf_file
            else "its tokenizer_config.json must define chat_template"
        )
        raise ModelLoadError(
            f"{where.name} has no chat template; pick an instruct/chat model ({where_defined})"
        )
    return tokenizer


def _refuse_remote(spec: ModelSpec) -> None:
    if is_remote(spec.source):
        raise ModelLoadError(
            f"{spec.source} is a model on a server; this command needs one that runs here "
            "(the app and `samchat ask` chat with remote ones)"
        )


def load_tokenizer(spec: ModelSpec | None = None) -> tuple[Any, str]:
    """The tokenizer alone (fast): for indexing documents without loading weights."""
    spec = spec or ModelSpec()
    _refuse_remote(spec)
    # The default model's tokenizer from its GGUF (kept beside it): the torch engine's converted
    # copy has the same vocabulary and fingerprint, and converting it would take the weights too.
    where = _resolve_source(spec, _noop, native_gguf=True)
    tok = _load_tokenizer(where, spec)
    return tok, tokenizer_fingerprint(tok)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _quiet_transformers() -> None:
    """samchat reports its own progress; transformers' tqdm bars would garble the CLI and TUI."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _quiet_gguf_conversion() -> None:
    """GGUF de-quantisation draws its own tqdm bar on stderr, which disable_progress_bar() does
    not reach (it imports torch: only for loads that convert)."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    bar = getattr(gguf_utils, "tqdm", None)
    if bar is not None and not isinstance(bar, functools.partial):
        gguf_utils.tqdm = functools.partial(bar, disable=True)


def _eos_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    ids: list[int] = []
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (gen_eos, tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.append(value)
        elif isinstance(value, list | tuple):
            ids.extend(int(v) for v in value)
    return tuple(dict.fromkeys(ids))


def _quantization_config(spec: ModelSpec, device_type: str) -> Any:
    if spec.quantize is None:
        return None
    if spec.quantize not in ("4bit", "8bit"):
        raise ModelLoadError(f"unknown --quantize {spec.quantize!r}; use 4bit or 8bit")
    if device_type != "cuda":
        raise ModelLoadError(
            f"--quantize {spec.quantize} needs a CUDA GPU (bitsandbytes); "
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

    if spec.quantize == "4bit":
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)
    return BitsAndBytesConfig(load_in_8bit=True)


def _names_gguf(source: str) -> bool:
    """A GGUF model: an Ollama model, a file with the GGUF header (whatever its name), or a
    .gguf path that does not exist (so loading it says so)."""
    if source.startswith(OLLAMA_PREFIX):
        return True
    path = Path(source).expanduser()
    if path.is_file():
        return is_gguf(path)
    return source.lower().endswith(".gguf")


def choose_engine(spec: ModelSpec) -> str:
    """The engine that will run spec: `auto` takes the engine that runs GGUF files as they are
    (llama.cpp) for a GGUF model (the bundled default included) on a CPU where it is installed,
    the default engine (torch) otherwise. A named engine that cannot run spec is refused."""
    if spec.engine not in ENGINES:
        raise ModelLoadError(f"unknown engine {spec.engine!r}; use one of {', '.join(ENGINES)}")
    gguf = spec.source is None or _names_gguf(spec.source)
    if spec.engine != AUTO:
        kind = engine_kind(spec.engine)
        _refuse(kind, spec, gguf)
        return kind.name
    native = native_gguf_kind()
    on_cpu = spec.device == "cpu" or (
        spec.device == "auto"
        and not (accelerator_possible() and resolve_device("auto").type != "cpu")
    )
    if native is None or not gguf or _torch_options(spec) or not on_cpu:
        return DEFAULT.name
    return DEFAULT.name if native.unavailable_reason() else native.name


def _torch_options(spec: ModelSpec) -> bool:
    return spec.dtype != "auto" or bool(spec.quantize) or bool(spec.cuda_graphs)


def _refuse(kind: EngineKind, spec: ModelSpec, gguf: bool) -> None:
    """A one-line ModelLoadError where `kind` cannot run spec as asked."""
    other = f"--engine {DEFAULT.name}"
    if kind.native_gguf and not gguf:
        if spec.source and Path(spec.source).expanduser().is_file():
            raise ModelLoadError(
                f"{spec.source} is not a GGUF file (no GGUF header); the {kind.label} engine "
                f"runs .gguf files (pass one, or a model directory with {other})"
            )
        raise ModelLoadError(
            f"the {kind.label} engine runs .gguf files; {spec.source} is not one "
            f"(use {other}, or pass a .gguf file)"
        )
    if spec.device != AUTO and spec.device not in kind.devices:
        raise ModelLoadError(
            f"the {kind.label} engine runs on the CPU here; drop --device {spec.device} "
            f"or use {other}"
        )
    if not kind.torch_options and _torch_options(spec):
        raise ModelLoadError(
            f"the {kind.label} engine runs the GGUF file's own types on the CPU; --dtype, "
            f"--quantize and --cuda-graphs apply to {other}"
        )
    reason = kind.unavailable_reason()
    if reason:
        raise ModelLoadError(f"the {kind.label} engine is unavailable: {reason}")


def requested_steps(spec: ModelSpec, device_type: str) -> StepMode:
    """How the torch engine should run its steps (TorchEngine's `steps`): "graphs" when asked,
    "auto" (graphs if the model's cache allows them) by default on CUDA for unquantized weights
    (bitsandbytes layers are not checked under capture), else "dynamic"."""
    if spec.cuda_graphs:
        return "graphs"
    if spec.cuda_graphs is None and device_type == "cuda" and not spec.quantize:
        return "auto"
    return "dynamic"


def load_model(
    spec: ModelSpec | None = None, progress: Progress | None = None, recent: Path | None = None
) -> LoadedModel:
    """Load a model ready for decoding, or raise ModelLoadError with a one-line reason.
    recent: the list a GGUF file the user named is added to (`catalog.recent_file`)."""
    spec = spec or ModelSpec()
    say = progress or _noop
    _refuse_remote(spec)
    _refuse_before_torch(spec)
    kind = engine_kind(choose_engine(spec))
    if kind.native_gguf:
        return _load_native_gguf(kind, spec, say, recent)
    if spec.dtype in WEIGHT_FORMATS:
        from samchat.models.cpu_formats import load_packed

        return load_packed(spec, say, recent)
    _quiet_transformers()
    device = resolve_device(spec.device)
    _cuda_graphs_need_cuda(spec, device.type)
    dtype = resolve_dtype(spec.dtype, device)
    quant = _quantization_config(spec, device.type)
    _quiet_gguf_conversion()
    where = _resolve_source(spec, say)
    from_gguf = where.gguf_file is not None
    if where.gguf_file:
        where = converted_gguf(where, spec, say)
    tokenizer = _chat_tokenizer(where, spec, say)
    say(f"loading weights of {where.name} ({dtype} on {device})")
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": spec.trust_remote_code}
    if where.gguf_file:
        kwargs["gguf_file"] = where.gguf_file
    if where.local:
        kwargs["local_files_only"] = True
    if quant is not None:
        kwargs["quantization_config"] = quant
        kwargs["device_map"] = {"": device.index or 0}
    try:
        model = AutoModelForCausalLM.from_pretrained(where.path, **kwargs)
    except Exception as exc:
        raise ModelLoadError(
            f"could not load {spec.source or where.name}: {_short(exc)}; "
            "check the file or choose another model with --model"
        ) from exc
    if quant is None:
        model = model.to(device)
    model.eval()
    if from_gguf:
        _remember(spec, recent)
    say("model ready")
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        device=device,
        name=where.name,
        fingerprint=tokenizer_fingerprint(tokenizer),
        eos_ids=_eos_ids(model, tokenizer),
        source=spec.source or where.path,
        dtype=str(dtype).removeprefix("torch."),
        steps=requested_steps(spec, device.type),
    )


def _load_native_gguf(
    kind: EngineKind, spec: ModelSpec, say: Progress, recent: Path | None
) -> LoadedModel:
    """A GGUF file for an engine that runs it as it is."""

    where = _resolve_source(spec, say, native_gguf=True)
    if where.gguf_file is None:
        raise ModelLoadError(
            f"the {kind.label} engine runs .gguf files; {spec.source} is a directory "
            f"(use --engine {DEFAULT.name}, or pass the .gguf file inside it)"
        )
    tokenizer = _chat_tokenizer(where, spec, say)
    path = Path(where.path) / where.gguf_file
    say(f"loading {where.gguf_file} with {kind.label}")
    weights = kind.load_gguf(path)
    _remember(spec, recent)
    say("model ready")
    eos = [weights.eos_id] if weights.eos_id >= 0 else []
    eos.extend(_eos_ids(None, tokenizer))
    eos.extend(weights.eog_ids)
    return LoadedModel(
        model=weights,
        tokenizer=tokenizer,
        device="cpu",
        name=where.name,
        fingerprint=tokenizer_fingerprint(tokenizer),
        eos_ids=tuple(dict.fromkeys(eos)),
        source=spec.source or str(path),
        dtype=weights.file_type,
        engine=kind.name,
    )
