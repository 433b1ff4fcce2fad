"""scripts/gguf_shapes.py: its shapes are the real models' (parameter counts as published), and
a shape that would not fit the disk or memory is skipped with one line saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.gguf_shapes import GB, SHAPES, TYPES, plan

# Parameter counts of the public models (tied embeddings counted once).
PUBLISHED = {
    "llama-3.2-1b": 1.236e9,
    "qwen2.5-1.5b": 1.544e9,
    "llama-3.2-3b": 3.213e9,
    "llama-3.1-8b": 8.030e9,
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_each_shape_has_the_real_models_parameters(name: str) -> None:
    assert SHAPES[name].parameters == pytest.approx(PUBLISHED[name], rel=0.005)


def test_what_does_not_fit_is_skipped_with_one_line_each() -> None:
    shapes = [SHAPES["llama-3.2-1b"], SHAPES["llama-3.1-8b"], SHAPES["qwen2.5-1.5b"]]
    chosen, skipped = plan(shapes, list(TYPES), int(6 * GB), int(64 * GB), Path("/x"))
    assert [s.name for s in chosen] == ["llama-3.2-1b"]
    assert len(skipped) == 2 and all("\n" not in line for line in skipped)
    assert skipped[0].startswith("skipped llama-3.1-8b: needs ") and "of disk" in skipped[0]
    chosen, skipped = plan(shapes[:1], list(TYPES), int(100 * GB), int(0.5 * GB), Path("/x"))
    assert chosen == [] and "of memory, 0.5 GB available" in skipped[0]
    chosen, skipped = plan(shapes, list(TYPES), int(100 * GB), None, Path("/x"))
    assert len(chosen) == 3 and skipped == []
