"""The engine credits each character of a reply to the drafter of the token that produced it."""

from __future__ import annotations

from typing import Any

from samchat.decoding.provenance import AttributedText, Provenance, pieces
from samchat.decoding.textstream import IncrementalDetokenizer


def test_runs_merge_and_clip() -> None:
    prov = Provenance()
    for n, source in [(3, "tr"), (2, "tr"), (0, "dyn"), (4, "plain"), (1, "dyn")]:
        prov.add(n, source)
    assert prov.runs() == [(5, "tr"), (4, "plain"), (1, "dyn")]
    assert prov.runs(4, 7) == [(1, "tr"), (2, "plain")]
    assert prov.runs(9, 20) == [(1, "dyn")]
    assert pieces("abcdefghij", prov.runs()) == (("abcde", "tr"), ("fghi", "plain"), ("j", "dyn"))


def test_real_tokens_are_credited_whole_characters(default_lm: Any) -> None:
    tok = default_lm.tokenizer
    text = " naïve café déjà vu"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    sources = ["tr"] * (len(ids) - 1) + ["dyn"]
    out = AttributedText(IncrementalDetokenizer(tok))
    for t, s in zip(ids, sources, strict=True):
        out.push(t, s)
    got = out.pieces(0, len(out.text))
    assert "".join(p for p, _ in got) == text == out.text
    assert got[-1][1] == "dyn" and {s for _, s in got} == {"tr", "dyn"}
    # A character split over several byte-level tokens stays whole, with the token that
    # completes it.
    emoji = " 🦜 鬱"
    eids = tok(emoji, add_special_tokens=False)["input_ids"]
    assert len(eids) > 2
    out = AttributedText(IncrementalDetokenizer(tok))
    for i, t in enumerate(eids):
        out.push(t, "tr" if i == len(eids) - 1 else "dyn")
    runs = out.provenance.runs()
    assert out.text == emoji and sum(n for n, _ in runs) == len(emoji)
    assert runs[-1] == (len(" 鬱"), "tr")


def test_runs_match_a_per_character_reference() -> None:
    import random

    rng = random.Random(7)
    prov = Provenance()
    chars: list[str] = []  # the drafter of each character
    for _ in range(300):
        n, source = rng.randrange(0, 4), rng.choice(["dyn", "static", "tr", "plain"])
        prov.add(n, source)
        chars.extend([source] * n)
    for _ in range(300):
        a = rng.randrange(0, len(chars) + 1)
        b = rng.randrange(a, len(chars) + 2)
        expect: list[tuple[int, str]] = []
        for source in chars[a:b]:
            if expect and expect[-1][1] == source:
                expect[-1] = (expect[-1][0] + 1, source)
            else:
                expect.append((1, source))
        assert prov.runs(a, b) == expect
