"""The decoding and sampling knobs (params.py): declared with help and valid defaults, checked
with one-line errors, read from mappings and from typed text."""

from __future__ import annotations

import dataclasses

import pytest

from samchat.decoding.knobs import KnobError, from_mapping, knob_of, knobs, to_mapping
from samchat.decoding.params import METHODS, DecodingConfig, SamplingParams
from samchat.errors import SamchatError


def test_invalid_settings_are_one_line_errors() -> None:
    with pytest.raises(SamchatError, match="unknown decoding method"):
        DecodingConfig(method="fast").validate()
    with pytest.raises(SamchatError, match=r"max_draft must be an integer >= 0, got -1$"):
        DecodingConfig(max_draft=-1).validate()
    with pytest.raises(SamchatError, match=r"top_p must be a number in \(0, 1\], got 1.5$"):
        SamplingParams(top_p=1.5).validate()
    with pytest.raises(SamchatError, match=r"^decoding.adaptive must be true or false, got 1$"):
        DecodingConfig(adaptive=1).validate()  # type: ignore[arg-type]
    with pytest.raises(SamchatError, match=r"static_context must be an integer >= 1, got 0$"):
        DecodingConfig(static_context=0).validate()  # context[-0:] would feed everything


def test_every_knob_is_declared_with_help_and_a_valid_default() -> None:
    for cls in (DecodingConfig, SamplingParams):
        declared = knobs(cls)
        assert [k.name for k in declared] == [f.name for f in dataclasses.fields(cls)]
        for k in declared:
            assert k.help and k.section == cls.SECTION
            assert k.check(k.default) == k.default
        cls().validate()
    assert knob_of(DecodingConfig, "method").choices == METHODS
    seed = knob_of(SamplingParams, "seed")
    assert seed.optional and seed.type is int and seed.default is None


def test_from_mapping_checks_types_and_fills_defaults() -> None:
    params = from_mapping(SamplingParams, {"temperature": 1, "stop": ["x"], "seed": None})
    assert params == SamplingParams(temperature=1.0, stop=("x",))
    assert isinstance(params.temperature, float)  # an int is fine for a float knob
    assert to_mapping(params)["stop"] == ("x",)
    assert from_mapping(DecodingConfig, {}) == DecodingConfig()
    for values, message in (
        ({"temperature": True}, r"^sampling.temperature must be a number >= 0, got True$"),
        ({"top_k": "3"}, r"^sampling.top_k must be an integer >= 0, got '3'$"),
        ({"top_k": 2.0}, r"^sampling.top_k must be an integer >= 0, got 2.0$"),
        ({"temperature": float("nan")}, r"temperature must be a number >= 0, got nan$"),
        ({"stop": "x"}, r"^sampling.stop must be a list of strings, got 'x'$"),
        ({"seed": -1}, r"^sampling.seed must be an integer in \[0, \d+\] or unset, got -1$"),
        ({"beam": 4}, r"^unknown sampling setting 'beam'; known: max_new_tokens, "),
    ):
        with pytest.raises(SamchatError, match=message):
            from_mapping(SamplingParams, values)
    with pytest.raises(SamchatError, match=r"^ask: decoding.method: unknown decoding method"):
        from_mapping(DecodingConfig, {"method": "fast"}, where="ask")


def test_knobs_parse_typed_text() -> None:
    k = {x.name: x for x in [*knobs(DecodingConfig), *knobs(SamplingParams)]}
    assert k["top_p"].parse(" 1 ") == 1.0 and isinstance(k["top_p"].parse("1"), float)
    assert k["max_draft"].parse("16") == 16
    assert k["adaptive"].parse("off") is False and k["adaptive"].parse("True") is True
    assert k["seed"].parse("") is None and k["seed"].parse("7") == 7
    assert k["stop"].parse("a,b") == ("a", "b") and k["stop"].parse("") == ()
    for name in ("seed", "top_p", "adaptive", "stop"):
        value = {"seed": 7, "top_p": 0.5, "adaptive": False, "stop": ("a", "b")}[name]
        assert k[name].parse(k[name].text(value)) == value
    with pytest.raises(KnobError) as caught:
        k["max_new_tokens"].parse("lots")
    assert caught.value.problem == "must be an integer >= 1, got 'lots'"
    assert str(caught.value) == "sampling.max_new_tokens must be an integer >= 1, got 'lots'"


def test_sampling_params_are_frozen_and_checked_once_when_made() -> None:
    """A reply's knobs are checked where they are made, and nothing changes them on the way to
    the policy (a changed copy is dataclasses.replace, checked again)."""
    import dataclasses

    with pytest.raises(KnobError):
        SamplingParams(top_p=1.5)
    params = SamplingParams()
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.temperature = 0.5  # type: ignore[misc]
    with pytest.raises(KnobError):
        dataclasses.replace(params, max_new_tokens=0)
