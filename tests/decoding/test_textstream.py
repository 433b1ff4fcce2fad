"""Streaming text: incremental detokenizing that never splits a character, and stop strings
held back until they can no longer begin."""

from __future__ import annotations

from typing import Any

import pytest

from samchat.decoding.textstream import IncrementalDetokenizer, StopMatcher


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from samchat.models import load_tokenizer

    tok, _ = load_tokenizer()
    return tok


def test_detokenizer_never_splits_multibyte_characters(tokenizer: Any) -> None:
    text = "Grüße aus Köln 🌍🚀 — 東京タワー は 333 m です。 naïve café ✓"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) > len(text.split())  # some characters span several tokens
    detok = IncrementalDetokenizer(tokenizer)
    deltas = [detok.push([t]) for t in ids]
    deltas.append(detok.flush())
    assert "".join(deltas) == text
    assert all("\ufffd" not in d for d in deltas)
    # Pushing several tokens at once gives the same text.
    detok2 = IncrementalDetokenizer(tokenizer)
    chunks = [ids[i : i + 3] for i in range(0, len(ids), 3)]
    assert "".join(detok2.push(c) for c in chunks) + detok2.flush() == text


def test_stop_matcher_finds_and_holds_back() -> None:
    stop = StopMatcher(("END", "\n\n"))
    assert stop
    assert stop.find("abc EN", 0) == -1
    assert stop.safe_len("abc EN") == 4  # "EN" may begin "END"
    assert stop.find("abc END more", 4) == 4
    assert stop.safe_len("abc\n") == 3
    assert stop.safe_len("abc") == 3
    assert not StopMatcher(("",))
