"""The engine registry: every engine is one entry there, and nothing outside the engines'
package branches on an engine's name."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from samchat.engines.registry import AUTO, DEFAULT, ENGINES, KINDS, engine_kind, native_gguf_kind

ROOT = Path(__file__).resolve().parents[2]


def _resolves(ref: str) -> object:
    module, _, name = ref.partition(":")
    found: object = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found


def test_every_kind_names_an_engine_that_opens() -> None:
    """Each kind's references resolve (its engine class, opener, availability and loading
    hooks), and its engine class offers the Engine protocol's operations."""
    assert (AUTO, *(k.name for k in KINDS)) == ENGINES and DEFAULT is KINDS[0]
    for kind in KINDS:
        assert engine_kind(kind.name) is kind
        cls = _resolves(kind.engine_class)
        for op in ("prefill", "forward", "commit", "crop"):
            assert callable(getattr(cls, op)), (kind.name, op)
        assert isinstance(getattr(cls, "meter", None), property), kind.name
        hooks = (kind.opener, kind.weights, kind.option_checks, kind.prepare, kind.auto_device)
        for ref in filter(None, hooks):
            assert callable(_resolves(ref)), (kind.name, ref)
        reason = kind.unavailable_reason()
        assert reason is None or isinstance(reason, str)
        assert set(kind.devices) <= {"cpu", "cuda", "mps"} and "cpu" in kind.devices
        assert kind.auto_device_type() in kind.devices
        assert bool(kind.dtypes) == kind.torch_options
    native = native_gguf_kind()
    assert native is not None and native.prepare is None and not native.torch_options
    with pytest.raises(KeyError, match="unknown engine 'nope'"):
        engine_kind("nope")


def test_the_torch_dtypes_name_its_packed_formats() -> None:
    """The registry and the option checks name the int4/int8 formats without importing torch;
    quant.py defines them."""
    from samchat.engines.flat.exactness import REQUANTIZED
    from samchat.engines.flat.loading import PACKED_DTYPES
    from samchat.engines.flat.quant import FORMATS

    assert (*FORMATS, REQUANTIZED) == PACKED_DTYPES and set(PACKED_DTYPES) <= set(DEFAULT.dtypes)


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
