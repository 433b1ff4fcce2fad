"""Stop tokens are derived once, from the model as found: every engine running the same GGUF file
stops on the same ids, the ones llama.cpp itself ends generation on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from samchat.models.gguf_header import read_metadata
from samchat.models.loader import ModelSpec, load_model
from samchat.models.stop_tokens import gguf_stop_ids, stop_ids


def _gguf(path: Path, tokens: list[str], **ids: int) -> Path:
    """A GGUF file holding a vocabulary and the given special token ids (no tensors)."""
    from gguf import GGUFWriter

    writer = GGUFWriter(path, "llama")
    writer.add_token_list(tokens)
    for name, value in ids.items():
        writer.add_uint32(f"tokenizer.ggml.{name}_token_id", value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def test_the_rule_reads_metadata_and_end_texts(tmp_path: Path) -> None:
    """The end-of-sequence id first; end-of-turn texts whatever the metadata says; a repository
    marker (fill-in-the-middle) by its text; an id past the vocabulary ignored; "<|end|>"
    dropped where tool-call markers show it ends no reply."""
    tokens = ["<s>", "</s>", "hi", "<|im_end|>", "<reponame>", "<|endoftext|>"]
    plain = _gguf(tmp_path / "a.gguf", tokens, eos=1, eot=99)
    assert gguf_stop_ids(plain) == (1, 3, 4, 5)
    harmony = ["<|start|>", "<|end|>", "<|return|>", "<|call|>", "x"]
    calls = _gguf(tmp_path / "b.gguf", harmony, eos=2)
    assert gguf_stop_ids(calls) == (2, 3)
    named = _gguf(tmp_path / "c.gguf", ["a", "b", "c"], eos=0, eot=2)
    assert gguf_stop_ids(named) == (0, 2)
    found = read_metadata(plain, {"tokenizer.ggml.tokens"}, {"hi"})["tokenizer.ggml.tokens"]
    assert found == (6, {2: "hi"})


def test_a_hugging_face_model_stops_where_its_config_says() -> None:
    class Tokenizer:
        eos_token_id = 7

    assert stop_ids(None, Tokenizer(), (3, 7)) == (3, 7)
    assert stop_ids(None, Tokenizer(), ()) == (7,)


@pytest.mark.model
def test_every_engine_stops_on_the_same_ids_for_a_gguf(gguf_lm: Any) -> None:
    """The bundled GGUF: llama.cpp and the flat engine stop on the same ids, which are
    llama.cpp's own end-of-generation tokens, its end of sequence first."""
    packed = load_model(ModelSpec(engine="flat"))
    assert packed.eos_ids == gguf_lm.eos_ids
    weights = gguf_lm.model
    assert gguf_lm.eos_ids[0] == weights.eos_id
    assert set(gguf_lm.eos_ids) == set(weights.eog_ids)
    ends = [gguf_lm.tokenizer.decode([i]) for i in gguf_lm.eos_ids]
    assert ends == ["<|im_end|>", "<|endoftext|>", "<reponame>"]
