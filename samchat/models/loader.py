"""Loading causal LMs: ModelSpec -> LoadedModel. A source (the bundled default, a directory, a
GGUF file, an Ollama model, a hub id) is found here and its tokenizer read; the engine the
registry names turns the files into weights (samchat/engines/*/: models imports none of them)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.engines.costs.cache import CurveMemo
from samchat.engines.registry import (
    AUTO,
    DEFAULT,
    ENGINES,
    KINDS,
    EngineKind,
    engine_kind,
    native_gguf_kind,
    resolve,
)
from samchat.engines.weights import Device, ModelFiles, WeightsRequest
from samchat.errors import (
    EngineDeclinedError,
    InexactError,
    ModelLoadError,
    TooLargeError,
    one_line,
)
from samchat.models.catalog import (
    OLLAMA_PREFIX,
    cached_snapshot,
    hf_hub_cache,
    is_gguf,
    remember_gguf,
    resolve_ollama,
)
from samchat.models.default import DEFAULT_MODEL_NAME, bundled_gguf, converted_dir
from samchat.models.device import accelerator_possible
from samchat.models.gguf_header import conversion_key
from samchat.models.stop_tokens import stop_ids
from samchat.models.tokenizer_cache import (
    gguf_tokenizer_beside,
    keep_tokenizer,
    load_tokenizer_files,
    tokenizer_cache,
    tokenizer_fingerprint,
)
from samchat.names import StepMode
from samchat.paths import model_cache_dir
from samchat.sources import is_remote
from samchat.tokenizer import Tokenizer

if TYPE_CHECKING:
    from samchat.models.engine_trial import Trial

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
    # The engine and dtype were chosen by samchat (engine_choice.preferred), not the user: an
    # engine that cannot compute the model exactly gives way to llama.cpp, with a notice.
    auto_engine: bool = False


@dataclass
class LoadedModel:
    """A model ready for decoding: a samchat.decoding SessionModel (and EngineModel)."""

    # The weights as its engine runs them (a transformers model, packed int4/int8 weights, or
    # llama.cpp's LlamaWeights): only that engine reads them, narrowed to its own type there.
    model: object
    tokenizer: Tokenizer  # transformers' tokenizer, or the GGUF's kept one
    device: Device | str  # a torch.device; "cpu" for llama.cpp
    name: str
    fingerprint: str
    eos_ids: tuple[int, ...]
    source: str = ""
    dtype: str = ""
    engine: str = "torch"  # the registry's name of the engine that runs `model`
    # How the torch engine runs decode and verify steps (TorchEngine's `steps`).
    steps: StepMode = "dynamic"
    # The cost curves measured for these weights, shared by every engine made from them.
    curves: CurveMemo = field(default_factory=CurveMemo, compare=False, repr=False)
    # Why it runs on this engine, as the front end that loaded it says (engine_choice.why);
    # and the engines' measurement owed for it, which that front end runs after an answer.
    engine_note: str = field(default="", compare=False)
    trial: Trial | None = field(default=None, compare=False, repr=False)

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
    rather than after importing it: a missing path, or options an engine cannot take (CUDA-only
    options on a named CPU)."""
    source = spec.source
    if source and not source.startswith(OLLAMA_PREFIX):
        _refuse_missing_path(source)
        if _offline() and not Path(source).expanduser().exists():
            _offline_snapshot(source)
    engine, _ = resolve(spec.engine, spec.dtype)
    for kind in sorted(KINDS, key=lambda k: k.name != engine):  # the engine that runs it first
        kind.check_options(spec)


def _resolve_source(spec: ModelSpec) -> ModelFiles:
    """Where spec's model is: a GGUF file as it is (the bundled default's too), a directory,
    or a hub id (its snapshot in the local cache when offline)."""
    if spec.source is None:
        gguf = bundled_gguf()
        return ModelFiles(str(gguf.parent), gguf.name, DEFAULT_MODEL_NAME, True)
    src = spec.source
    if src.startswith(OLLAMA_PREFIX):
        blob = resolve_ollama(src)
        if not is_gguf(blob):
            raise ModelLoadError(
                f"{src} is not a GGUF model in Ollama's store ({blob}); samchat runs GGUF models"
            )
        return ModelFiles(str(blob.parent), blob.name, src.removeprefix(OLLAMA_PREFIX), True)
    path = Path(src).expanduser()
    if path.is_file():
        if not is_gguf(path):  # by its header: an Ollama blob has no .gguf suffix
            raise ModelLoadError(
                f"{src} is not a GGUF file (no GGUF header); pass a model directory, "
                "a GGUF file or a hub id"
            )
        return ModelFiles(str(path.parent), path.name, path.name.removesuffix(".gguf"), True)
    if path.is_dir():
        if not (path / "config.json").exists():
            raise ModelLoadError(
                f"{src} has no config.json; pass a Hugging Face model directory, "
                "a .gguf file or a hub id"
            )
        return ModelFiles(str(path), None, path.name, True)
    _refuse_missing_path(src)
    if _offline():
        snapshot = _offline_snapshot(src)
        return ModelFiles(str(snapshot), None, src.rsplit("/", 1)[-1], True)
    return ModelFiles(src, None, src.rsplit("/", 1)[-1], False)


def converted_place(spec: ModelSpec, files: ModelFiles) -> Path | None:
    """Where an engine that does not run GGUF files keeps a GGUF model converted: the default
    model under its name (converted_dir), any other keyed by the file's identity (None: no
    GGUF file)."""
    gguf = files.gguf
    if gguf is None:
        return None
    if spec.source is None:
        return converted_dir()
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in files.name)[:60]
    return model_cache_dir() / f"gguf-{safe}-{conversion_key(gguf)}"


def _remember(spec: ModelSpec, recent: Path | None) -> None:
    """A GGUF file the user named is offered again by `samchat models` and the model picker
    (listed in `recent`; None: not remembered)."""
    if recent is not None and spec.source and not spec.source.startswith(OLLAMA_PREFIX):
        path = Path(spec.source).expanduser()
        if path.is_file():
            remember_gguf(path, recent)


def keep_bundled_tokenizer() -> Path:
    """Convert the bundled default GGUF's tokenizer and keep it beside the file (make setup)."""
    from samchat.models.default import bundled_gguf

    gguf = bundled_gguf()
    target = gguf_tokenizer_beside(tokenizer_cache(gguf), gguf)
    if not target.is_dir():
        tokenizer, _ = load_tokenizer(ModelSpec(source=str(gguf)))
        keep_tokenizer(tokenizer, target)
    return target


def _chat_tokenizer(where: ModelFiles, spec: ModelSpec, say: Progress) -> Tokenizer:
    """The tokenizer, which must carry a chat template (both engines render prompts with it)."""
    say(f"loading tokenizer of {where.name}")
    tokenizer = load_tokenizer_files(where, spec.source, spec.trust_remote_code)
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


def load_tokenizer(spec: ModelSpec | None = None) -> tuple[Tokenizer, str]:
    """The tokenizer alone (fast): for indexing documents without loading weights."""
    spec = spec or ModelSpec()
    _refuse_remote(spec)
    # The default model's tokenizer from its GGUF (kept beside it): the torch engine's converted
    # copy has the same vocabulary and fingerprint, and converting it would take the weights too.
    where = _resolve_source(spec)
    tok = load_tokenizer_files(where, spec.source, spec.trust_remote_code)
    return tok, tokenizer_fingerprint(tok)


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
    """The engine that will run spec: the one its format names (`--dtype int4`: the flat
    engine, with `--engine torch` or auto too); else `auto` takes the engine that runs GGUF
    files as they are (llama.cpp) for a GGUF model (the bundled default included) on a CPU
    where it is installed, the default engine (torch) otherwise. A named engine that cannot
    run spec is refused."""
    if spec.engine not in ENGINES:
        raise ModelLoadError(f"unknown engine {spec.engine!r}; use one of {', '.join(ENGINES)}")
    gguf = spec.source is None or _names_gguf(spec.source)
    engine = resolve(spec.engine, spec.dtype)[0]
    if engine != AUTO:
        kind = engine_kind(engine)
        _refuse(kind, spec, gguf)
        return kind.name
    native = native_gguf_kind()
    on_cpu = spec.device == "cpu" or (
        spec.device == "auto"
        and not (accelerator_possible() and DEFAULT.auto_device_type() != "cpu")
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
    if not kind.dtypes and _torch_options(spec):
        raise ModelLoadError(
            f"the {kind.label} engine runs the GGUF file's own types on the CPU; --dtype, "
            f"--quantize and --cuda-graphs apply to {other}"
        )
    if spec.dtype != AUTO and spec.dtype not in kind.dtypes:
        takes = f"{', '.join(kind.dtypes[:-1])} or {kind.dtypes[-1]}"
        raise ModelLoadError(
            f"the {kind.label} engine runs --dtype {takes}; --dtype {spec.dtype} applies to {other}"
        )
    if not kind.torch_options and (spec.quantize or spec.cuda_graphs):
        raise ModelLoadError(
            f"the {kind.label} engine runs its own weight formats on the CPU; --quantize and "
            f"--cuda-graphs apply to {other}"
        )
    reason = kind.unavailable_reason()
    if reason:
        raise ModelLoadError(f"the {kind.label} engine is unavailable: {reason}")


def load_model(
    spec: ModelSpec | None = None, progress: Progress | None = None, recent: Path | None = None
) -> LoadedModel:
    """Load a model ready for decoding, or raise ModelLoadError with a one-line reason.
    recent: the list a GGUF file the user named is added to (`catalog.recent_file`).

    Where the engine cannot run the file here (EngineDeclinedError: it cannot compute the
    file's model exactly, or its load would not fit in memory): if samchat chose it, a one-line
    notice and llama.cpp runs the file; if the user did, the error names the problem and
    `--engine llamacpp`."""
    spec = spec or ModelSpec()
    say = progress or _noop
    try:
        return _load(spec, say, recent)
    except EngineDeclinedError as exc:
        native = native_gguf_kind()
        if native is None or native.name == spec.engine:
            raise
        if not spec.auto_engine or native.unavailable_reason():
            text, remedy = str(exc), f"--engine {native.name}"
            # The same class (the engine's own subclasses take other arguments).
            same = next((c for c in (InexactError, TooLargeError) if isinstance(exc, c)), None)
            raise (same or EngineDeclinedError)(
                text if remedy in text else f"{text}; {remedy} runs it"
            ) from None
        say(f"{one_line(exc)}: running it on {native.label}")
        fallback = replace(spec, engine=native.name, dtype=AUTO, auto_engine=False)
        return _load(fallback, say, recent)


def _load(spec: ModelSpec, say: Progress, recent: Path | None) -> LoadedModel:
    _refuse_remote(spec)
    _refuse_before_torch(spec)
    kind = engine_kind(choose_engine(spec))
    found = _resolve_source(spec)
    if kind.native_gguf and found.gguf_file is None:
        raise ModelLoadError(
            f"the {kind.label} engine runs .gguf files; {spec.source} is a directory "
            f"(use --engine {DEFAULT.name}, or pass the .gguf file inside it)"
        )

    def save_tokenizer(folder: Path) -> None:
        load_tokenizer_files(found, spec.source, spec.trust_remote_code).save_pretrained(folder)

    request = WeightsRequest(
        files=found,
        options=spec,
        cache_dir=model_cache_dir(),
        converted=converted_place(spec, found),
        save_tokenizer=save_tokenizer,
        say=say,
    )
    files = kind.prepare_files(request)  # a GGUF model converted, for an engine that must
    tokenizer = _chat_tokenizer(files, spec, say)
    weights = kind.load_weights(replace(request, files=files))
    if found.gguf_file:
        _remember(spec, recent)
    say("model ready")
    return LoadedModel(
        model=weights.model,
        tokenizer=tokenizer,
        device=weights.device,
        name=found.name,
        fingerprint=tokenizer_fingerprint(tokenizer),
        # From the model as found: a GGUF file stops alike in every engine (stop_tokens.py).
        eos_ids=stop_ids(found.gguf, tokenizer, weights.eos_ids),
        source=spec.source or files.location,
        dtype=weights.dtype,
        engine=kind.name,
        steps=weights.steps,
    )
