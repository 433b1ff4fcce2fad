"""The engine registry: every engine is one entry there, and nothing outside the engines'
package branches on an engine's name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from samchat.engines.registry import AUTO, DEFAULT, ENGINES, KINDS, engine_kind, native_gguf_kind

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_names_an_engine_that_opens() -> None:
    """Each kind's references resolve (its engine class, availability and weights loader), and
    its engine class offers the Engine protocol's operations."""
    assert (AUTO, *(k.name for k in KINDS)) == ENGINES and DEFAULT is KINDS[0]
    for kind in KINDS:
        assert engine_kind(kind.name) is kind
        module, _, name = kind.engine_class.partition(":")
        cls = getattr(__import__(module, fromlist=[name]), name)
        for op in ("prefill", "forward", "commit", "crop", "cost_curve", "describe"):
            assert callable(getattr(cls, op)), (kind.name, op)
        if kind.opener is not None:
            module, _, name = kind.opener.partition(":")
            assert callable(getattr(__import__(module, fromlist=[name]), name)), kind.name
        reason = kind.unavailable_reason()
        assert reason is None or isinstance(reason, str)
        assert set(kind.devices) <= {"cpu", "cuda", "mps"} and "cpu" in kind.devices
    native = native_gguf_kind()
    assert native is not None and native.gguf_weights and not native.torch_options
    with pytest.raises(TypeError, match="converts GGUF files"):
        DEFAULT.load_gguf(Path("model.gguf"))
    with pytest.raises(KeyError, match="unknown engine 'nope'"):
        engine_kind("nope")


def test_no_engine_name_is_compared_outside_the_engines_package() -> None:
    """A third engine touches its package and the registry: no module elsewhere compares or
    spells an engine's name as a string literal (help texts name them in prose)."""
    names = "|".join(re.escape(k.name) for k in KINDS if k is not DEFAULT)
    literal = re.compile(rf"""["']({names})["']""")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "samchat").rglob("*.py"))
        if "engines" not in path.relative_to(ROOT / "samchat").parts[:1]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if literal.search(line)
    ]
    assert found == []
