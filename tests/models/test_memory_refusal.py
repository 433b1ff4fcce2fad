"""A model whose flat-engine load would not fit in memory is refused before loading: llama.cpp
runs it with a one-line notice where samchat chose the engine, and the error names the need,
what is available and `--engine llamacpp` where the user did. The real loader and the bundled
model, with only the memory reading replaced."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import pytest

from samchat.engines import memory
from samchat.errors import TooLargeError
from samchat.models.loader import ModelSpec, load_model

pytestmark = pytest.mark.model
FLAT = ModelSpec(engine="flat", dtype="int4")


@dataclass(frozen=True)
class FixedMemory:
    """A memory reading that always says `free` bytes (None: the system does not say)."""

    free: int | None

    def available(self) -> int | None:
        return self.free


@pytest.fixture
def little_memory() -> Iterator[None]:
    previous = memory.use_reading(FixedMemory(64 * 2**20))
    try:
        yield
    finally:
        memory.use_reading(previous)


def test_samchats_choice_goes_to_llamacpp_with_one_notice(little_memory: None) -> None:
    said: list[str] = []
    lm = load_model(replace(FLAT, auto_engine=True), said.append)
    assert lm.engine == "llamacpp"
    notices = [s for s in said if "running it on llama.cpp" in s]
    assert len(notices) == 1 and "\n" not in notices[0]
    assert "needs about" in notices[0] and "0.1 GiB" in notices[0], notices[0]
    assert not [s for s in said if s.startswith("packing")]  # refused before loading


def test_an_explicit_choice_names_the_need_and_llamacpp(little_memory: None) -> None:
    with pytest.raises(TooLargeError) as caught:
        load_model(FLAT)
    text = str(caught.value)
    assert "needs about" in text and "available" in text and "--engine llamacpp" in text
    assert "\n" not in text


@pytest.mark.parametrize("reading", [memory.SystemMemory(), FixedMemory(None)])
def test_with_room_or_no_reading_it_loads_on_the_flat_engine(
    reading: memory.MemoryReading,
) -> None:
    previous = memory.use_reading(reading)
    try:
        said: list[str] = []
        lm = load_model(replace(FLAT, auto_engine=True), said.append)
    finally:
        memory.use_reading(previous)
    assert lm.engine == "flat" and lm.dtype == "int4"
    assert not [s for s in said if "running it on" in s]
