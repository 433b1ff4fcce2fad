"""The tokenizers samchat keeps in its cache: where a GGUF file's is kept once converted by
transformers (by the file's identity, beside the bundled file, or by its metadata for a copy),
and KeptTokenizer, which reads one back with the `tokenizers` library, its chat template
rendered by jinja2 in the sandbox and with the helpers transformers gives templates. Loading it
this way skips importing transformers and torch, most of a short `samchat ask` on llama.cpp;
the tokens are the same (tested against transformers on real prompts, templates included).

Only the folder layout transformers writes is read. Anything else in it (extra special tokens,
space clean-up, several templates) raises ValueError, and the caller loads the folder with
transformers instead.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.engines.weights import ModelFiles, quiet_transformers
from samchat.errors import ModelLoadError, one_line
from samchat.messages import Message
from samchat.models.gguf_header import conversion_key, metadata_digest
from samchat.models.gguf_splits import as_llamacpp
from samchat.paths import model_cache_dir
from samchat.tokenizer import Tokenizer

if TYPE_CHECKING:
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer as Backend

# The named special tokens, in transformers' order (SPECIAL_TOKENS_ATTRIBUTES).
SPECIAL_KEYS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
# samchat's step after transformers' conversion: a new one converts every kept tokenizer again.
CONVERSION = "llamacpp-split-1"
# tokenizer_config.json keys that change nothing this class does (the rest are refused).
_KNOWN = {
    *SPECIAL_KEYS,
    "backend",
    "tokenizer_class",
    "model_max_length",
    "is_local",
    "local_files_only",
    "add_bos_token",  # applied by tokenizer.json's post-processor, which transformers saved
    "add_eos_token",
    "clean_up_tokenization_spaces",  # only false is accepted
    "extra_special_tokens",  # only empty is accepted
    "chat_template",  # only a single template is accepted
}


def _special(value: object) -> str | None:
    """A special token's text, stored as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _template_environment() -> ImmutableSandboxedEnvironment:
    """transformers' chat-template environment: sandboxed, trim_blocks and lstrip_blocks, loop
    controls, its tojson (no HTML escaping), raise_exception and strftime_now."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: object,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def strftime_now(format: str) -> str:
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class KeptTokenizer:
    """The parts of a transformers tokenizer samchat calls, with the same results."""

    FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")

    def __init__(
        self,
        backend: Backend,
        config: dict[str, object],
        chat_template: str | None,
        folder: Path | None = None,
    ) -> None:
        self._backend = backend
        self.folder = folder  # where it was read from (save_pretrained copies it)
        self.chat_template = chat_template
        self.special_tokens_map: dict[str, str] = {}
        for key in SPECIAL_KEYS:
            text = _special(config.get(key))
            if text is not None:
                self.special_tokens_map[key] = text

    @classmethod
    def load(cls, folder: Path) -> KeptTokenizer:
        """Read a folder transformers saved; ValueError (or OSError) where it holds anything
        this class would not reproduce."""
        from tokenizers import Tokenizer

        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        if not isinstance(config, dict):
            raise ValueError("tokenizer_config.json is not an object")
        unknown = sorted(set(config) - _KNOWN)
        if unknown:
            raise ValueError(f"unhandled tokenizer settings {unknown}")
        if config.get("clean_up_tokenization_spaces") or config.get("extra_special_tokens"):
            raise ValueError("space clean-up and extra special tokens need transformers")
        template = config.get("chat_template")
        if template is not None and not isinstance(template, str):
            raise ValueError("several chat templates need transformers")
        file = folder / "chat_template.jinja"
        if file.is_file():
            template = file.read_text(encoding="utf-8")
        return cls(Tokenizer.from_file(str(folder / "tokenizer.json")), config, template, folder)

    def save_pretrained(self, target: Path | str) -> None:
        """Copy the folder it was read from (transformers reads the copy as it read that)."""
        if self.folder is None:
            raise ValueError("this tokenizer was not read from a folder")
        out = Path(target)
        out.mkdir(parents=True, exist_ok=True)
        for name in self.FILES:
            if (self.folder / name).is_file():
                shutil.copyfile(self.folder / name, out / name)

    # -- special tokens -----------------------------------------------------------------------

    def _id(self, key: str) -> int | None:
        text = self.special_tokens_map.get(key)
        if text is None:
            return None
        found: int | None = self._backend.token_to_id(text)
        return found

    @property
    def eos_token_id(self) -> int | None:
        return self._id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._id("pad_token")

    @property
    def bos_token_id(self) -> int | None:
        return self._id("bos_token")

    @property
    def all_special_tokens(self) -> list[str]:
        return list(dict.fromkeys(self.special_tokens_map.values()))

    def get_vocab(self) -> dict[str, int]:
        vocab: dict[str, int] = self._backend.get_vocab(with_added_tokens=True)
        return vocab

    # -- text <-> ids -------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = self._backend.encode(text, add_special_tokens=add_special_tokens).ids
        return ids

    def __call__(
        self, text: str, add_special_tokens: bool = True, verbose: bool = True
    ) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        text: str = self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text

    # -- chat template ------------------------------------------------------------------------

    @cached_property
    def _template(self) -> jinja2.Template:
        if self.chat_template is None:
            raise ValueError("this tokenizer has no chat template")
        return _template_environment().from_string(self.chat_template)

    def apply_chat_template(
        self,
        messages: Sequence[Message],
        add_generation_prompt: bool = False,
        tokenize: bool = False,
    ) -> str:
        """The conversation as the template writes it (as text: tokenize=True is not offered)."""
        if tokenize:
            raise ValueError("KeptTokenizer renders text; encode it with add_special_tokens=False")
        if not messages:
            raise ValueError("Cannot apply chat template to an empty conversation.")
        chat = [{k: str(v) for k, v in m.items() if v is not None} for m in messages]
        text: str = self._template.render(
            messages=chat,
            tools=None,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **self.special_tokens_map,
        )
        return text


def tokenizer_fingerprint(tokenizer: Tokenizer) -> str:
    """A stable hash of the vocabulary and special tokens: it keys the static index."""
    vocab = tokenizer.get_vocab()
    digest = hashlib.sha256()
    digest.update(json.dumps(sorted(vocab.items()), ensure_ascii=False).encode())
    digest.update(json.dumps(sorted(map(str, tokenizer.all_special_tokens))).encode())
    return digest.hexdigest()[:16]


def _converters() -> str:
    """What a kept tokenizer was made by: the libraries that convert and read it (another
    version may build it differently) and samchat's own step (llama.cpp's split, gguf_splits)."""
    from importlib.metadata import version

    return f"{version('transformers')}|{version('tokenizers')}|{CONVERSION}"


def tokenizer_cache(gguf: Path) -> Path:
    """Where a GGUF file's tokenizer is kept once converted: keyed by the file's identity and by
    what converted it (_converters)."""
    libs = _converters()
    key = hashlib.sha256(f"{conversion_key(gguf)}|{libs}".encode()).hexdigest()[:16]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in gguf.stem)[:60]
    return model_cache_dir() / f"tokenizer-{safe}-{key}"


def load_tokenizer_files(
    where: ModelFiles, source: str | None, trust_remote_code: bool
) -> Tokenizer:
    """The tokenizer of the model files found for `source`. A GGUF file's is converted from its
    vocabulary once (seconds, by transformers) and kept in the model cache, from where it loads
    in milliseconds without transformers (KeptTokenizer)."""
    gguf = where.gguf
    cached = tokenizer_cache(gguf) if gguf is not None else None
    same: Path | None = None
    if cached is not None and gguf is not None:
        for folder in (gguf_tokenizer_beside(cached, gguf), cached):
            kept = read_kept(folder) if folder.is_dir() else None
            if kept is not None:
                return kept
        # A copy of a file converted before (moved, linked, touched, or the same model in
        # Ollama's store and LM Studio's folder): its metadata, so its tokenizer, is the same.
        same = _metadata_tokenizer(gguf)
        kept = read_kept(same) if same is not None and same.is_dir() else None
        if kept is not None:
            shutil.rmtree(cached, ignore_errors=True)  # a damaged copy, if any
            keep_tokenizer(kept, cached)  # found by its path from the next start on
            return kept
    quiet_transformers()
    from transformers import AutoTokenizer

    if cached is not None and cached.is_dir():
        try:
            converted: Tokenizer = AutoTokenizer.from_pretrained(cached, local_files_only=True)
            return converted
        except Exception:  # a damaged copy is converted again
            shutil.rmtree(cached, ignore_errors=True)
    kwargs: dict[str, object] = {"trust_remote_code": trust_remote_code}
    if where.gguf_file:
        kwargs["gguf_file"] = where.gguf_file
    if where.local:
        kwargs["local_files_only"] = True
    try:
        tokenizer: Tokenizer = AutoTokenizer.from_pretrained(where.path, **kwargs)
    except Exception as exc:  # transformers raises many types; all mean "cannot load"
        raise ModelLoadError(
            f"could not load the tokenizer of {source or where.name}: {one_line(exc)}"
        ) from exc
    if gguf is not None:
        tokenizer = as_llamacpp(tokenizer, gguf)
    if cached is not None:
        keep_tokenizer(tokenizer, cached)
        if same is not None:
            keep_tokenizer(tokenizer, same)
        # From the kept copy, as every later start reads it: one tokenizer whatever the start.
        return read_kept(cached) or tokenizer
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


def read_kept(folder: Path) -> KeptTokenizer | None:
    """A kept tokenizer through `tokenizers` alone, or None where transformers must read it."""
    try:
        return KeptTokenizer.load(folder)
    except Exception:  # unreadable or unusual (tokenizers raises its own types): transformers
        return None


def keep_tokenizer(tokenizer: Tokenizer, target: Path) -> None:
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
