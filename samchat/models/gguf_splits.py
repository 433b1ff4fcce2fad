"""How llama.cpp splits text before byte-level BPE, by the GGUF's `tokenizer.ggml.pre`.

transformers' GGUF conversion picks a tokenizer class by the architecture (a qwen2 file gets
Qwen2Tokenizer, which imposes Qwen2's split whatever the file says) and knows only some of
llama.cpp's pre-tokenizer names (SmolLM's `smollm`, which splits digits one by one, falls back
to GPT-2's split). The ids then differ from llama.cpp's on the same text, and a tokenizer that
differs from the file's is another model. `as_llamacpp` rebuilds the split llama.cpp applies
(its regexes, in order, each on the pieces of the one before) as a plain tokenizers pipeline.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from samchat.models.gguf_header import read_metadata

if TYPE_CHECKING:
    from tokenizers import Tokenizer as Backend

    from samchat.tokenizer import Tokenizer

# llama.cpp's regexes (llama-vocab.cpp, llm_tokenizer_bpe), spelled for Oniguruma.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")

# tokenizer.ggml.pre -> the regexes llama.cpp splits by (its name groups).
SPLITS: dict[str, tuple[str, ...]] = {
    "": _DEFAULT,
    "default": _DEFAULT,
    **dict.fromkeys(
        ("gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "exaone4", "mellum"), (_GPT2,)
    ),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
        (r"\p{N}", _GPT2),
    ),
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0"),
        (_LLAMA3,),
    ),
    **dict.fromkeys(("lfm2", "dbrx", "smaug-bpe"), (_LLAMA3,)),
    **dict.fromkeys(
        ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan"),
        (_QWEN2,),
    ),
}
# Where llama.cpp takes a piece that is a whole token as it is, before any merge.
IGNORE_MERGES = frozenset(
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2")
)


def llamacpp_split(gguf: Path) -> str | None:
    """The file's pre-tokenizer name where llama.cpp splits its byte-level BPE by one of
    SPLITS; None for any other vocabulary (sentencepiece's is split by no regex)."""
    keys = ("tokenizer.ggml.model", "tokenizer.ggml.pre")
    meta = read_metadata(gguf, keys)
    if meta.get("tokenizer.ggml.model") != "gpt2":
        return None
    pre = meta.get("tokenizer.ggml.pre", "")
    return pre if isinstance(pre, str) and pre in SPLITS else None


def split_backend(backend: Backend, pre: str) -> Backend:
    """A copy of `backend` that splits text as llama.cpp does for `pre` (no normalizer:
    llama.cpp has none for byte-level vocabularies)."""
    from tokenizers import Regex, pre_tokenizers
    from tokenizers import Tokenizer as Backend

    out = Backend.from_str(backend.to_str())
    steps: list[pre_tokenizers.PreTokenizer] = [
        pre_tokenizers.Split(Regex(r), behavior="isolated") for r in SPLITS[pre]
    ]
    steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False))
    out.normalizer = None
    out.pre_tokenizer = pre_tokenizers.Sequence(steps)
    out.model.ignore_merges = pre in IGNORE_MERGES
    return out


def as_llamacpp(tokenizer: Tokenizer, gguf: Path) -> Tokenizer:
    """transformers' tokenizer of a GGUF, splitting text as llama.cpp does for the file, as a
    plain TokenizersBackend (its folder reads back as saved, whatever the architecture); the
    tokenizer itself where llama.cpp applies no regex split."""
    pre = llamacpp_split(gguf)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if pre is None or backend is None:
        return tokenizer
    from transformers import TokenizersBackend

    specials = dict(getattr(tokenizer, "special_tokens_map", {}))
    kwargs = getattr(tokenizer, "init_kwargs", {})
    flags = {k: kwargs[k] for k in ("add_bos_token", "add_eos_token") if k in kwargs}
    rebuilt: Tokenizer = TokenizersBackend(
        tokenizer_object=split_backend(backend, pre),
        chat_template=getattr(tokenizer, "chat_template", None),
        **specials,
        **flags,
    )
    return rebuilt
