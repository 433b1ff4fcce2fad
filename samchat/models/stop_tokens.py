"""The token ids a reply stops on, derived in one place for every engine: a GGUF model's from its
metadata by llama.cpp's rule (so the torch engine, reading the same file converted or packed,
stops where llama.cpp does), a Hugging Face model's from its generation config and tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from samchat.models.gguf_header import Strings, read_metadata
from samchat.tokenizer import Tokenizer

_TOKENS = "tokenizer.ggml.tokens"
# Ids the metadata names that llama.cpp ends generation on (llama-vocab.cpp): end of sequence,
# of turn, of message, and the fill-in-the-middle markers (pad, repository, file separator).
_END_KEYS = ("eos", "eot", "eom", "fim_pad", "fim_rep", "fim_sep")
# Token texts llama.cpp ends generation on whatever the metadata says: converters often leave
# the end-of-turn marker out of it.
_END_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
    }
)
# Where the metadata names no fill-in-the-middle marker, llama.cpp takes a token by its text.
_FIM_TEXTS = {
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
# llama.cpp drops one end text where others show it is no end there: "<|end|>" in a vocabulary
# with tool-call markers (o200k_harmony, solar-open), "</s>" beside "<|tool_response>" (gemma4).
_CALLS = ("<|call|>", "<|calls|>")


def _key(name: str) -> str:
    return f"tokenizer.ggml.{name}_token_id"


def gguf_stop_ids(gguf: Path) -> tuple[int, ...]:
    """The ids llama.cpp ends generation on for this GGUF file (llama_vocab_is_eog), read from
    its metadata: the end-of-sequence id first, then the others in order."""
    fim = {text for texts in _FIM_TEXTS.values() for text in texts}
    meta = read_metadata(gguf, {_TOKENS, *map(_key, _END_KEYS)}, _END_TEXTS | fim)
    tokens = meta.get(_TOKENS)
    vocab = tokens if isinstance(tokens, Strings) else Strings(0, {})
    marks = vocab.items  # id -> text, for the texts searched
    named: dict[str, int] = {}
    for name in _END_KEYS:
        value = meta.get(_key(name))
        if isinstance(value, int) and 0 <= value < vocab.length:
            named[name] = value  # llama.cpp ignores an id past the vocabulary
    for name, candidates in _FIM_TEXTS.items():
        if name not in named:
            hits = [i for i, text in sorted(marks.items()) if text in candidates]
            if hits:
                named[name] = hits[0]
    ids = set(named.values()) | {i for i, text in marks.items() if text in _END_TEXTS}
    by_text = {marks[i]: i for i in sorted(ids, reverse=True) if i in marks}  # lowest id
    calls = any(c in by_text for c in _CALLS)
    if "<|end|>" in by_text and calls and ("<|return|>" in by_text or "<|flush|>" in by_text):
        ids.discard(by_text["<|end|>"])
    if "</s>" in by_text and "<|tool_response>" in by_text:
        ids.discard(by_text["</s>"])
    eos = named.get("eos")
    first = [eos] if eos is not None and eos in ids else []
    return (*first, *sorted(ids - set(first)))


def stop_ids(gguf: Path | None, tokenizer: Tokenizer, declared: Sequence[int]) -> tuple[int, ...]:
    """The ids a model stops on: for a GGUF model (gguf: its file, whichever engine runs it)
    llama.cpp's rule; otherwise the ids its weights declare (a Hugging Face generation
    config), then the tokenizer's end-of-sequence id. Each id once, in that order."""
    ids = list(gguf_stop_ids(gguf)) if gguf is not None else list(declared)
    if not ids or gguf is None:
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            ids.append(eos)
    return tuple(dict.fromkeys(ids))
