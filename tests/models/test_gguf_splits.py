"""A GGUF's tokenizer splits text as llama.cpp does for the file's `tokenizer.ggml.pre`,
whatever its architecture: samchat's ids equal llama-cpp-python's `tokenize` on the same file,
converted and read back from the cache (a tokenizer that differs from the file's is another
model: perplexities and replies would not be the file's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.models.default import bundled_gguf
from samchat.models.gguf_splits import SPLITS
from samchat.models.loader import ModelSpec, load_tokenizer
from samchat.models.tokenizer_cache import KeptTokenizer

APACHE = Path("/usr/share/common-licenses/Apache-2.0")
# Where the splits differ: digits in runs and after spaces, runs of spaces and newlines,
# contractions in both cases, punctuation runs, letters of other scripts, emoji, a special token.
TRICKY = (
    "Version 2.0, January 2004   12345 6789.0\n\n   1. Definitions.\r\n\t\t"
    "I'm sure we'LL see; you've 'd THEY'RE it's  --  ...!!! ?? a+b<=c^2 ~|x| $100 #1\n"
    "naïve café 中文字符 😀👍🏽 résumé  ﬁ Ünïcödé\u00a0nbsp\u2003em\n\n\n"
    "<|im_end|> end   \n  "
)


def _text() -> str:
    head = APACHE.read_text(encoding="utf-8")[:6000] if APACHE.is_file() else ""
    return TRICKY + head + TRICKY


def _dressed(path: Path, arch: str, pre: str) -> Path:
    """The bundled vocabulary under `arch` with `tokenizer.ggml.pre = pre` (no tensors: only
    the vocabulary is read, by both sides), plus a token "200" that no merge makes: only a
    split that takes whole tokens before merging (Llama 3's) reaches it."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    source = GGUFReader(bundled_gguf())
    writer = GGUFWriter(str(path), arch)
    added = {"tokenizer.ggml.tokens": "200", "tokenizer.ggml.token_type": 1}
    for key, field in source.fields.items():
        if key.startswith("tokenizer.") and key != "tokenizer.ggml.pre":
            kind = GGUFValueType(field.types[0])
            sub = GGUFValueType(field.types[1]) if kind == GGUFValueType.ARRAY else None
            value = field.contents()
            if key in added:
                value = [*value, added[key]]
            writer.add_key_value(key, value, kind, sub_type=sub)
    writer.add_string("tokenizer.ggml.pre", pre)
    for key, value in (("block_count", 1), ("context_length", 512), ("embedding_length", 64)):
        writer.add_uint32(f"{arch}.{key}", value)
    for key, value in (("feed_forward_length", 128), ("attention.head_count", 4)):
        writer.add_uint32(f"{arch}.{key}", value)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def _llamacpp_ids(path: Path, text: str) -> list[int]:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    try:
        ids: list[int] = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        return ids
    finally:
        llm.close()


@pytest.mark.parametrize(
    ("arch", "pre"),
    [
        ("llama", "smollm"),
        ("qwen2", "smollm"),
        ("qwen3", "smollm"),
        ("qwen2", "qwen2"),
        ("qwen3", "qwen2"),
        ("llama", "llama-bpe"),
        ("llama", "gpt-2"),
        ("llama", "default"),
    ],
)
def test_ids_equal_llamacpps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str, pre: str
) -> None:
    """On text where the splits differ, the ids of a fresh conversion and of the kept copy
    both equal llama.cpp's. Before, transformers picked Qwen2's split for a qwen2 file read
    back from the cache, and GPT-2's for `smollm` (which splits digits one by one)."""
    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(tmp_path / "cache"))
    path = _dressed(tmp_path / f"{arch}-{pre}.gguf", arch, pre)
    text = _text()
    theirs = _llamacpp_ids(path, text)
    spec = ModelSpec(source=str(path))
    converted, fingerprint = load_tokenizer(spec)
    assert converted(text, add_special_tokens=False)["input_ids"] == theirs
    kept, kept_fingerprint = load_tokenizer(spec)
    assert isinstance(kept, KeptTokenizer) and kept_fingerprint == fingerprint
    assert kept(text, add_special_tokens=False)["input_ids"] == theirs
    assert kept.decode(theirs) == text


def test_the_splits_differ_on_this_text(tmp_path: Path) -> None:
    """The test above would pass for a wrong split only if llama.cpp's splits agreed here: the
    names it tests give different ids on the text (Llama 3's and Qwen2's differ in digit
    runs and whole tokens taken before merging: the "200" added)."""
    text = _text()
    seen = {
        pre: _llamacpp_ids(_dressed(tmp_path / f"{pre}.gguf", "llama", pre), text)
        for pre in ("smollm", "qwen2", "llama-bpe", "gpt-2", "default")
    }
    assert len({tuple(ids) for ids in seen.values()}) == len(seen)
    assert set(seen) <= set(SPLITS)
