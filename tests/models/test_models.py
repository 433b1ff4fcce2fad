"""Loading models: the offline default, local directories, and clear errors for bad sources."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import torch

from samchat.errors import ModelLoadError
from samchat.models import ModelSpec, load_model, load_tokenizer
from samchat.models.default import bundled_gguf, converted_dir
from tests.decoding.prompts import LONG_CONTEXT, MULTI_TURN, SINGLE_TURN


def test_default_model_loads_offline_with_chat_template(default_lm: Any) -> None:
    assert default_lm.name == "SmolLM2-135M-Instruct"
    assert default_lm.device.type == "cpu"
    assert default_lm.tokenizer.chat_template
    # The GGUF's end tokens, as llama.cpp reads them (the end of turn first).
    ends = ["<|im_end|>", "<|endoftext|>", "<reponame>"]
    assert default_lm.tokenizer.convert_ids_to_tokens(list(default_lm.eos_ids)) == ends
    n_params = sum(p.numel() for p in default_lm.model.parameters())
    assert 130_000_000 < n_params < 140_000_000
    assert (converted_dir() / "model.safetensors").is_file()


def test_default_model_answers_deterministically(default_lm: Any) -> None:
    tok = default_lm.tokenizer
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    out = default_lm.model.generate(ids, max_new_tokens=12, do_sample=False)
    answer = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer


def test_tokenizer_alone_has_the_same_fingerprint(default_lm: Any) -> None:
    tok, fingerprint = load_tokenizer()
    assert fingerprint == default_lm.fingerprint
    assert tok("hello world")["input_ids"] == default_lm.tokenizer("hello world")["input_ids"]


def test_local_directory_and_gguf_file_load_like_the_default(default_lm: Any) -> None:
    from_dir = load_model(ModelSpec(source=str(converted_dir())))
    ids = torch.tensor([[1, 504, 3458, 282, 4649, 314]])
    with torch.no_grad():
        expected = default_lm.model(ids).logits
        assert torch.allclose(from_dir.model(ids).logits, expected, atol=1e-4)
    assert from_dir.fingerprint == default_lm.fingerprint
    _tok, fingerprint = load_tokenizer(ModelSpec(source=str(bundled_gguf())))
    assert fingerprint == default_lm.fingerprint


def _copy_default(tmp_path: Path, weights: bool = True) -> Path:
    target = tmp_path / "model"
    target.mkdir()
    for item in converted_dir().iterdir():
        if item.name == "model.safetensors" and not weights:
            continue
        shutil.copy(item, target / item.name)
    return target


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("/nonexistent/model-dir", "does not exist"),
        ("./missing.gguf", "does not exist"),
        ("some-org/some-model", "HF_HUB_OFFLINE"),
    ],
)
def test_bad_sources_raise_one_line_errors(source: str, fragment: str) -> None:
    with pytest.raises(ModelLoadError) as info:
        load_model(ModelSpec(source=source))
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_file_that_is_not_gguf(tmp_path: Path) -> None:
    bogus = tmp_path / "weights.bin"
    bogus.write_bytes(b"\0" * 64)
    with pytest.raises(ModelLoadError, match=r"not a GGUF file \(no GGUF header\)"):
        load_model(ModelSpec(source=str(bogus)))


def test_directory_without_config(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(ModelSpec(source=str(tmp_path)))


def test_corrupt_weights_give_a_clear_error(tmp_path: Path) -> None:
    target = _copy_default(tmp_path, weights=False)
    (target / "model.safetensors").write_bytes(b"this is not a safetensors file" * 10)
    with pytest.raises(ModelLoadError, match="could not load") as info:
        load_model(ModelSpec(source=str(target)))
    assert "\n" not in str(info.value)


def test_corrupt_gguf_gives_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"GGUF" + b"\x00" * 100)
    with pytest.raises(ModelLoadError, match="could not load"):
        load_model(ModelSpec(source=str(bogus)))


def test_model_without_chat_template_is_refused(tmp_path: Path) -> None:
    target = _copy_default(tmp_path, weights=False)
    (target / "chat_template.jinja").unlink(missing_ok=True)
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    with pytest.raises(ModelLoadError, match="no chat template"):
        load_model(ModelSpec(source=str(target)))


def test_quantize_without_cuda_is_refused() -> None:
    with pytest.raises(ModelLoadError, match="needs a CUDA GPU"):
        load_model(ModelSpec(quantize="4bit", device="cpu"))


def test_cuda_graphs_without_cuda_are_refused() -> None:
    """Before any weights load; a GGUF model goes to the torch engine, which runs them."""
    from samchat.models.loader import choose_engine

    with pytest.raises(ModelLoadError, match="--cuda-graphs needs a CUDA GPU"):
        load_model(ModelSpec(cuda_graphs=True, device="cpu"))
    assert choose_engine(ModelSpec(cuda_graphs=True)) == "torch"


def test_cuda_graphs_are_the_default_where_they_can_run() -> None:
    """Unquantized weights on CUDA replay their steps as graphs unless --no-cuda-graphs; a CPU,
    bitsandbytes weights or an explicit no run them eagerly ("auto" lets the engine decide on
    the model's KV cache)."""
    from samchat.cli import build_parser
    from samchat.cli_options import spec_from_args
    from samchat.engines.torch.loading import requested_steps

    def steps(argv: list[str], device_type: str) -> str:
        args = build_parser().parse_args(["ask", *argv, "hi"])
        return requested_steps(spec_from_args(args), device_type)

    assert steps([], "cuda") == "auto"
    assert steps([], "cpu") == "dynamic"
    assert steps(["--no-cuda-graphs"], "cuda") == "dynamic"
    assert steps(["--cuda-graphs"], "cuda") == "graphs"
    assert steps(["--quantize", "4bit"], "cuda") == "dynamic"
    assert steps(["--quantize", "4bit", "--cuda-graphs"], "cuda") == "graphs"


def test_unavailable_device_is_refused() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the refusal only applies without it")
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        load_model(ModelSpec(device="cuda"))


def test_a_gguf_tokenizer_kept_in_the_cache_tokenizes_as_the_file_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GGUF's vocabulary is converted once and kept; the kept copy is read without
    transformers (KeptTokenizer) and gives the text, tokens and fingerprint transformers gives
    for it on real prompts, chat templates included; a damaged copy is converted again."""
    from transformers import AutoTokenizer

    from samchat.models.loader import keep_bundled_tokenizer
    from samchat.models.tokenizer_cache import (
        KeptTokenizer,
        tokenizer_cache,
        tokenizer_fingerprint,
    )

    # A copy: the bundled file's tokenizer is kept beside it at setup, and this tests the cache.
    gguf = tmp_path / "copy" / bundled_gguf().name
    gguf.parent.mkdir()
    shutil.copy2(bundled_gguf(), gguf)
    spec = ModelSpec(source=str(gguf))
    load_tokenizer(spec)  # converts and keeps it
    kept_dir = tokenizer_cache(gguf)
    assert (kept_dir / "tokenizer.json").is_file()
    # transformers reading the kept folder (its split is llama.cpp's: test_gguf_splits.py).
    fresh = AutoTokenizer.from_pretrained(kept_dir, local_files_only=True)
    kept, fingerprint = load_tokenizer(spec)
    assert isinstance(kept, KeptTokenizer)
    assert fingerprint == tokenizer_fingerprint(fresh)
    chats = [[{"role": "user", "content": q}] for q in SINGLE_TURN + LONG_CONTEXT]
    for turns in MULTI_TURN:
        roles = ("user", "assistant")
        chats.append([{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)])
    chats[0].insert(0, {"role": "system", "content": "Be brief. <|im_end|> 😀\n\tok"})
    chats.append([{"role": "user", "content": "  spaces,\r\n<|im_start|>tabs\t and 中文 ﬁ "}])
    for chat in chats:
        for prompt in (True, False):
            text = fresh.apply_chat_template(chat, add_generation_prompt=prompt, tokenize=False)
            assert kept.apply_chat_template(chat, add_generation_prompt=prompt) == text
            ids = fresh(text, add_special_tokens=False)["input_ids"]
            assert kept(text, add_special_tokens=False)["input_ids"] == ids
            assert kept.decode(ids, skip_special_tokens=True) == fresh.decode(
                ids, skip_special_tokens=True
            )
        text = chat[-1]["content"]
        ids = fresh(text)["input_ids"]
        assert kept(text)["input_ids"] == ids
        assert kept.encode(text, add_special_tokens=False) == fresh.encode(
            text, add_special_tokens=False
        )
        assert kept.decode(ids) == fresh.decode(ids)
    assert kept.eos_token_id == fresh.eos_token_id
    assert kept.pad_token_id == fresh.pad_token_id
    assert kept.all_special_tokens == fresh.all_special_tokens
    # A damaged copy is not trusted: the file is converted again.
    (kept_dir / "tokenizer.json").write_text("{")
    again, again_fingerprint = load_tokenizer(spec)
    assert again_fingerprint == fingerprint
    assert again(SINGLE_TURN[0])["input_ids"] == fresh(SINGLE_TURN[0])["input_ids"]
    # The bundled file's copy, kept beside it (make setup does this), is read with an empty
    # model cache: a first start converts nothing.
    beside = keep_bundled_tokenizer()
    assert beside.parent == bundled_gguf().parent and (beside / "tokenizer.json").is_file()
    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(tmp_path / "empty-cache"))
    first, first_fingerprint = load_tokenizer(ModelSpec(source=str(bundled_gguf())))
    assert isinstance(first, KeptTokenizer) and first.folder == beside
    assert first_fingerprint == fingerprint
    # The default model named by nothing: the same, with the torch engine's converted copy
    # not made for it (its tokenizer has this fingerprint too).
    default, default_fingerprint = load_tokenizer(ModelSpec())
    assert isinstance(default, KeptTokenizer) and default_fingerprint == fingerprint
    assert not list((tmp_path / "empty-cache").iterdir())  # nothing converted
    # A setting KeptTokenizer would not reproduce sends the folder to transformers.
    odd = tmp_path / "odd"
    shutil.copytree(kept_dir, odd)
    config = json.loads((odd / "tokenizer_config.json").read_text())
    (odd / "tokenizer_config.json").write_text(json.dumps({**config, "do_lower_case": True}))
    with pytest.raises(ValueError, match="do_lower_case"):
        KeptTokenizer.load(odd)


def test_a_copy_of_a_gguf_reads_the_tokenizer_kept_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tokenizer is converted once per GGUF metadata: a copy at another path (an Ollama blob
    of a file used before, say) reads the kept one without transformers, and keeps it under
    its own path; a file whose metadata differs (one letter of its chat template) converts
    anew; a header that is not GGUF is one clear line."""
    from transformers import AutoTokenizer

    from samchat.models.gguf_header import metadata_digest
    from samchat.models.tokenizer_cache import KeptTokenizer, tokenizer_cache

    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(tmp_path / "cache"))
    first = tmp_path / "a" / "model.gguf"
    first.parent.mkdir()
    shutil.copy2(bundled_gguf(), first)
    _, fingerprint = load_tokenizer(ModelSpec(source=str(first)))  # converts

    def converted(*_: Any, **__: Any) -> Any:
        raise AssertionError("converted again")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", converted)
    blob = tmp_path / "blobs" / "sha256-0123"
    blob.parent.mkdir()
    shutil.copyfile(first, blob)  # a new path and mtime
    assert metadata_digest(blob) == metadata_digest(first)
    tokenizer, blob_fingerprint = load_tokenizer(ModelSpec(source=str(blob)))
    assert isinstance(tokenizer, KeptTokenizer) and blob_fingerprint == fingerprint
    assert (tokenizer_cache(blob) / "tokenizer.json").is_file()

    data = bytearray(first.read_bytes())
    at = data.index(b"tokenizer.chat_template") + len(b"tokenizer.chat_template") + 12
    at = data.index(b"message", at)
    data[at] = ord("M")  # the same length: only the metadata's bytes differ
    other = tmp_path / "other.gguf"
    other.write_bytes(bytes(data))
    assert metadata_digest(other) != metadata_digest(first)
    with pytest.raises(ModelLoadError, match="converted again"):
        load_tokenizer(ModelSpec(source=str(other)))

    other.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 5))  # ends before its 5 key-values
    with pytest.raises(ModelLoadError) as bad:
        metadata_digest(other)
    assert "cannot read the GGUF header" in str(bad.value) and "\n" not in str(bad.value)


def test_the_header_reader_agrees_with_gguf_and_refuses_a_cut_file(tmp_path: Path) -> None:
    """read_header (the flat engine's, which skips the vocabulary) gives the gguf library's
    tensor table and metadata for the bundled file; a file cut inside its header, or before a
    tensor its table places, is one clear line."""
    from gguf import GGUFReader

    from samchat.models.gguf_header import read_header

    meta, table = read_header(bundled_gguf())
    reader = GGUFReader(bundled_gguf())
    assert [(t.name, t.dims, t.kind, t.at) for t in table] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.tensor_type), int(t.data_offset))
        for t in reader.tensors
    ]
    for key, field in reader.fields.items():
        value = field.contents()
        if key.startswith("GGUF.") or (isinstance(value, list) and isinstance(value[0], str)):
            continue  # the header's own counts; arrays of strings are only counted
        assert meta[key] == (pytest.approx(value) if isinstance(value, float) else value), key
    assert isinstance(meta["llama.attention.layer_norm_rms_epsilon"], float)

    data = bundled_gguf().read_bytes()
    cut = tmp_path / "cut.gguf"
    for end in (len(data) // 1000, table[-1].at - 1):  # in the vocabulary; before a tensor
        cut.write_bytes(data[:end])
        with pytest.raises(ModelLoadError) as bad:
            read_header(cut)
        assert "cannot read the GGUF header" in str(bad.value) and "\n" not in str(bad.value)
