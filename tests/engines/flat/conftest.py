"""The flat engine's tests: tiny GGUF files of every type it reads, quantized by llama.cpp
(made once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def gguf_types(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A few layers of random weights in the bundled model's architecture (F32), and the same
    file quantized by llama.cpp's own quantizer into each file type whose tensors the flat
    engine reads exactly: {file type: path}."""
    from scripts.gguf_variants import FTYPES, tiny_variants

    return tiny_variants(tmp_path_factory.mktemp("gguf-types"), list(FTYPES))
