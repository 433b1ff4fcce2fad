"""Fixtures for the suffix-automaton tests: every core test runs on the compiled extension and
on the same source executed as plain Python."""

from __future__ import annotations

import re
from types import ModuleType

import pytest

import samchat.sam as sam_pkg
from samchat.sam import automaton as compiled_or_source


@pytest.fixture(params=["compiled", "pure"], scope="session")
def sam_mod(request: pytest.FixtureRequest) -> ModuleType:
    if request.param == "pure":
        return sam_pkg.load_pure()
    if not sam_pkg.is_compiled(compiled_or_source):
        # tests/sam/test_backend.py fails in this case, so the gap is never silent.
        pytest.skip("the mypyc extension is not built (pip install -e .)")
    return compiled_or_source


def _english_words() -> list[str]:
    # CPython ships its own documentation topics: a long, real English text, always at hand.
    from pydoc_data.topics import topics

    text = " ".join(topics[k] for k in sorted(topics))
    return re.findall(r"\w+|[^\w\s]", text)


@pytest.fixture(scope="session")
def real_tokens() -> list[int]:
    """About 40k tokens of real English text (words and punctuation mapped to ids)."""
    vocab: dict[str, int] = {}
    return [vocab.setdefault(w, len(vocab) + 1) for w in _english_words()[:40_000]]
