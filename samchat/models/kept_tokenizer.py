"""A tokenizer samchat keeps in its cache (a GGUF file's, converted once by transformers), read
back with the `tokenizers` library, its chat template rendered by jinja2 in the sandbox and with
the helpers transformers gives templates. Loading it this way skips importing transformers and
torch, most of a short `samchat ask` on llama.cpp; the tokens are the same (tested against
transformers on real prompts, templates included).

Only the folder layout transformers writes is read. Anything else in it (extra special tokens,
space clean-up, several templates) raises ValueError, and the caller loads the folder with
transformers instead.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from samchat.messages import Message

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


def _special(value: Any) -> str | None:
    """A special token's text, stored as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _template_environment() -> Any:
    """transformers' chat-template environment: sandboxed, trim_blocks and lstrip_blocks, loop
    controls, its tojson (no HTML escaping), raise_exception and strftime_now."""
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
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
        backend: Any,
        config: dict[str, Any],
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
    def _template(self) -> Any:
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
