"""GGUF weights loaded by llama.cpp (through llama-cpp-python's low-level API), shared by every
LlamaCppEngine made from them. Importing this module does not import llama_cpp."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import logging
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from samchat import interrupts
from samchat.errors import ModelLoadError

if TYPE_CHECKING:
    from samchat.engines.weights import Weights, WeightsRequest

log = logging.getLogger(__name__)
_INIT = threading.Lock()
_READY: list[object] = []  # the log callback, kept alive while llama.cpp may call it
# A Ctrl-C that lands in the log callback: ctypes would print it and drop it (the C call goes
# on as if nothing happened), so the callback keeps it and the caller raises it on return.
_PENDING: list[BaseException] = []


def has_pending() -> bool:
    if interrupts.take_deferred():
        _PENDING.append(KeyboardInterrupt())
    return bool(_PENDING)


def raise_pending() -> None:
    """Raise the KeyboardInterrupt (or other exception) that llama.cpp's log callback caught
    or deferred (samchat.interrupts.defer_in) during the C call that just returned."""
    if has_pending():
        exc = _PENDING[0]
        _PENDING.clear()
        raise exc


def unavailable_reason() -> str | None:
    """Why the llama.cpp engine cannot run here, or None when it can."""
    if importlib.util.find_spec("llama_cpp") is None:
        return (
            "llama-cpp-python is not installed "
            "(run `make setup`, or pip install 'samchat[llamacpp]')"
        )
    return None


def llama() -> ModuleType:
    """The llama_cpp module, initialised once, its log routed to Python logging."""
    import llama_cpp

    with _INIT:
        if not _READY:

            def _log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
                try:
                    if level in (2, 3):  # warnings and errors; info and debug are noise here
                        log.debug("llama.cpp: %s", text.decode("utf-8", "replace").rstrip())
                except BaseException as exc:  # Ctrl-C: kept for raise_pending, not swallowed
                    _PENDING.append(exc)

            # A Ctrl-C can land on the callback's first line, before its try: deferred there.
            interrupts.defer_in(_log.__code__)
            callback = llama_cpp.llama_log_callback(_log)
            llama_cpp.llama_log_set(callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _READY.append(callback)
    raise_pending()
    return llama_cpp


def threads() -> int:
    """CPU threads for llama.cpp: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as pkg_version

    try:
        return pkg_version("llama_cpp_python")
    except PackageNotFoundError:
        return "?"


def system_info() -> str:
    """The CPU features this llama.cpp build uses, e.g. 'AVX2 = 1 | AVX512 = 1 | ...'."""
    lib = llama()
    raw: bytes = lib.llama_print_system_info()
    return raw.decode("utf-8", "replace").strip()


class LlamaWeights:
    """One loaded GGUF model: its handle, vocabulary size, training context and file type."""

    def __init__(self, path: Path, handle: object, lib: ModuleType) -> None:
        self.path = path
        self.handle = handle
        self._lib = lib
        self.vocab = lib.llama_model_get_vocab(handle)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(handle))
        self.eos_id = int(lib.llama_vocab_eos(self.vocab))
        buf = ctypes.create_string_buffer(256)
        lib.llama_model_desc(handle, buf, ctypes.sizeof(buf))
        self.desc = buf.value.decode("utf-8", "replace")
        # "llama 135M Q4_1" -> "Q4_1", "llama 8B Q4_K - Medium" -> "Q4_K - Medium"
        parts = self.desc.split(" ", 2)
        self.file_type = parts[2] if len(parts) == 3 else self.desc
        # Drafting needs cache rows that can be dropped again; recurrent state cannot be rolled
        # back, and a sliding window may already have overwritten the cells a rollback needs.
        self.plain_reason: str | None = None
        if lib.llama_model_is_recurrent(handle) or lib.llama_model_is_hybrid(handle):
            self.plain_reason = "its recurrent state cannot be rolled back to a prefix"
        elif int(lib.llama_model_n_swa(handle)) > 0:
            self.plain_reason = "its sliding-window cache cannot be rolled back to a prefix"

    @functools.cached_property
    def eog_ids(self) -> tuple[int, ...]:
        """Every token llama.cpp ends generation on (end of turn included), by its own reading
        of the vocabulary: read on demand (a call per token), since replies stop on the ids
        the loader derives from the file (samchat/models/stop_tokens.py), which equal these."""
        is_eog = self._lib.llama_vocab_is_eog
        return tuple(t for t in range(self.n_vocab) if is_eog(self.vocab, t))

    @classmethod
    def load(cls, path: Path) -> LlamaWeights:
        if not path.is_file():
            raise ModelLoadError(f"model file {path} does not exist; check the path")
        with path.open("rb") as f:
            magic = f.read(4)
        if magic != b"GGUF":
            raise ModelLoadError(
                f"{path} is not a GGUF file; pass a .gguf model or a model directory"
            )
        lib = llama()
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0
        handle = lib.llama_model_load_from_file(str(path).encode(), params)
        if _PENDING:
            if handle:
                lib.llama_model_free(handle)
            raise_pending()
        if not handle:
            raise ModelLoadError(
                f"llama.cpp could not load {path.name} (an architecture or type this build "
                "does not know, or a damaged file); try --engine torch or another file"
            )
        return cls(path, handle, lib)

    def close(self) -> None:
        if self.handle:
            self._lib.llama_model_free(self.handle)
            self.handle = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the library may be gone
            self.close()


def load_weights(request: WeightsRequest) -> Weights:
    """The weights of request.files's GGUF file (the registry's loading hook; the loader
    refuses a model that is no GGUF file first)."""
    from samchat.engines.weights import Weights

    gguf = request.files.gguf
    if gguf is None:
        raise ModelLoadError(f"the llama.cpp engine runs .gguf files; {request.files.path} is none")
    request.say(f"loading {gguf.name} with llama.cpp")
    weights = LlamaWeights.load(gguf)
    return Weights(model=weights, device="cpu", dtype=weights.file_type)


def loaded_weights(model: object) -> LlamaWeights:
    """A loaded model's weights, which the llama.cpp engine runs only if llama.cpp loaded them."""
    if not isinstance(model, LlamaWeights):
        raise TypeError(f"the llama.cpp engine runs GGUF weights, not {type(model).__name__}")
    return model
