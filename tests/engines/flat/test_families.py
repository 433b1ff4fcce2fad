"""The flat engine on the families it runs (llama with Llama 3's rope_freqs or linear rope
scaling, qwen2 with q/k/v biases, qwen3 with q/k norms), on tiny random GGUFs made by
scripts/gguf_redress.py with the bundled tokenizer: logits match llama.cpp's on the same file,
every row of a verification equals its one-token step in both forwards, and what the engine
cannot compute exactly is refused (llama.cpp runs it where samchat chose the engine)."""

from __future__ import annotations

import functools
import importlib.util
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from samchat.engines.flat.engine import FlatEngine
from samchat.engines.flat.gguf_weights import read_gguf
from samchat.engines.layout import TreeLayout
from samchat.errors import InexactError
from samchat.models.default import bundled_gguf
from samchat.models.loader import ModelSpec, load_model

pytestmark = pytest.mark.model
SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gguf_redress.py"
# Llama files whose query heads share a key head five and six at a time, with head sizes 64 and
# 128: the native attention takes such heads in packs of unequal sizes (4 + 1, 4 + 2).
GROUPS = {
    "group5": {"hidden": 320, "heads": 5, "kv_heads": 1},
    "group6": {"hidden": 768, "heads": 6, "kv_heads": 1},
}
COMPUTED = ("llama", "llama3", "linear", "qwen2", "qwen3", *GROUPS)
# Largest logit difference from llama.cpp's, relative to the row's largest logit: both round
# activations (llama.cpp to 8 bits per block of 32, the flat engine to bfloat16) and their
# caches (Q8_0 and bfloat16), so rows agree to about a percent, not bit for bit.
TOLERANCE = 0.03


def _redress() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gguf_redress", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_ggufs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One tiny file per family, made once per test session, plus the refused ones."""
    redress = _redress()
    folder = tmp_path_factory.mktemp("families")
    tokenizer = bundled_gguf()
    files: dict[str, Path] = {}
    for family in redress.TINY:
        files[family] = folder / f"{family}.gguf"
        redress.tiny(files[family], family, tokenizer, seed=len(files))
    for name, dims in GROUPS.items():
        files[name] = folder / f"{name}.gguf"
        redress.tiny(files[name], "llama", tokenizer, seed=len(files), **dims)
    files["stray"] = folder / "stray.gguf"
    stray = {"blk.0.attn_output.bias": np.full(128, 0.01, dtype=np.float32)}
    redress.tiny(files["stray"], "llama", tokenizer, extra=stray)
    files["window"] = folder / "window.gguf"
    redress.tiny(files["window"], "llama", tokenizer, keys={"attention.sliding_window": 96})
    return files


@functools.cache
def _flat(path: Path, native: bool = True) -> Any:
    """The flat engine's model of a file for the native forward (where it builds) or the
    Python one, loaded once per process (engines are made anew)."""
    from samchat.engines.flat.native import SWITCH

    with pytest.MonkeyPatch.context() as m:
        if not native:
            m.setenv(SWITCH, "0")
        return load_model(ModelSpec(source=str(path), engine="flat"))


def _ids(n: int, seed: int = 0) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(49152) for _ in range(n)]


@pytest.mark.parametrize("family", COMPUTED)
def test_logits_match_llamacpp(tiny_ggufs: dict[str, Path], family: str) -> None:
    """300 tokens read at once by llama.cpp and by each forward of the flat engine: every row
    within TOLERANCE of llama.cpp's, the same choices. Leaving out a family's part (the rope
    factors, the linear scale, the biases) moves rows far past TOLERANCE on these files."""
    path = tiny_ggufs[family]
    ids = _ids(300)
    flat = _flat(path)
    assert flat.model.shape.arch == ("llama" if family not in ("qwen2", "qwen3") else family)
    cpp = load_model(ModelSpec(source=str(path), engine="llamacpp"))
    theirs = cpp.kind.open(cpp).prefill(ids, logits=len(ids))
    assert theirs is not None
    scale = np.abs(theirs).max(axis=1)
    for native in (True, False):
        ours = FlatEngine(_flat(path, native)).prefill(ids, logits=len(ids))
        assert ours is not None
        worst = float((np.abs(ours - theirs).max(axis=1) / scale).max())
        assert worst < TOLERANCE, (native, worst)
        same = np.mean(ours.argmax(axis=1) == theirs.argmax(axis=1))
        assert same > 0.95, (native, same)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("family", COMPUTED)
def test_rows_equal_one_token_steps(tiny_ggufs: dict[str, Path], family: str, native: bool) -> None:
    """Sequences of 1..20 rows after a context that crosses the 64-position split, and a
    tree: each row equals the one-token step at its place, in each forward."""
    lm = _flat(tiny_ggufs[family], native)
    context, path = _ids(70, 1), _ids(21, 2)
    engine = FlatEngine(lm)
    engine.prefill(context)
    steps = []
    for token in path:
        start = engine.length
        steps.append(engine.forward([token])[0].copy())
        engine.commit(start, [0])
    for k in range(1, 21):
        engine.crop(len(context))
        rows = engine.forward(path[:k])
        for i in range(k):
            assert np.array_equal(rows[i], steps[i]), (k, i)
    engine.crop(len(context))
    tokens = [path[0], path[1], 7, path[2], path[3], 9, path[4], 11]
    parents = [-1, 0, 0, 1, 3, 3, 4, 2]
    layout = TreeLayout(tokens[1:], [p - 1 for p in parents[1:]])
    rows = engine.forward(tokens, layout)
    for node, depth in ((0, 0), (1, 1), (3, 2), (4, 3), (6, 4)):
        assert np.array_equal(rows[node], steps[depth]), node


def test_what_it_cannot_compute_is_refused(tiny_ggufs: dict[str, Path], tmp_path: Path) -> None:
    """YaRN scaling, a tensor the loader does not consume and an unknown architecture:
    InexactError, never a silently different model; a sliding window bounds the context."""
    with pytest.raises(InexactError, match="yarn rope scaling"):
        read_gguf(tiny_ggufs["yarn"])
    with pytest.raises(InexactError, match=r"blk\.0\.attn_output\.bias"):
        read_gguf(tiny_ggufs["stray"])
    shape, _ = read_gguf(tiny_ggufs["window"])
    assert shape.context == 96
    from gguf import GGUFWriter

    other = tmp_path / "phi3.gguf"
    writer = GGUFWriter(str(other), "phi3")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(InexactError, match="phi3 model"):
        read_gguf(other)


def test_an_explicit_choice_names_the_problem_and_llamacpp(tiny_ggufs: dict[str, Path]) -> None:
    with pytest.raises(InexactError) as caught:
        _flat(tiny_ggufs["yarn"])
    text = str(caught.value)
    assert "yarn" in text and "--engine llamacpp" in text and "\n" not in text


@pytest.mark.parametrize("name", ["yarn", "stray"])
def test_samchats_choice_falls_back_to_llamacpp(tiny_ggufs: dict[str, Path], name: str) -> None:
    """The engine chosen by samchat (engine_choice.preferred): one notice, llama.cpp runs it."""
    said: list[str] = []
    spec = ModelSpec(source=str(tiny_ggufs[name]), engine="flat", dtype="int4", auto_engine=True)
    lm = load_model(spec, progress=said.append)
    assert lm.engine == "llamacpp"
    notices = [s for s in said if "running it on llama.cpp" in s]
    assert len(notices) == 1 and "\n" not in notices[0]


def test_the_native_forward_checks_its_inputs(tiny_ggufs: dict[str, Path]) -> None:
    """A bad id, position, row, count or shape raises a clear Python exception before the
    forward reads anything (the model works on after each)."""
    import torch

    from samchat.engines.flat.forward import FlatCache, run

    lm = _flat(tiny_ggufs["llama"])
    model = lm.model
    assert model.native is not None
    shape = model.shape
    cache = FlatCache(shape)
    op = torch.ops.samchat_flat.forward
    none = torch.empty(0, dtype=torch.long)

    def forward(ids: Any, length: int = 0, buf: Any = None, logits: int = 1, tree: Any = None):
        anc, off = tree if tree is not None else (none, none)
        ids = ids if isinstance(ids, torch.Tensor) else torch.tensor(ids, dtype=torch.long)
        buf = cache.buf if buf is None else buf
        return op(model.native.handle, ids, anc, off, length, buf, logits)

    rows = cache.buf.shape[3]
    cases: list[tuple[type[Exception], str, dict[str, Any]]] = [
        (IndexError, "outside the vocabulary", {"ids": [5, -1]}),
        (IndexError, "outside the vocabulary", {"ids": [shape.vocab]}),
        (ValueError, "int64", {"ids": torch.tensor([5], dtype=torch.int32)}),
        (ValueError, "no inputs", {"ids": [], "logits": 0}),
        (IndexError, "outside the cache", {"ids": [5, 6], "length": rows - 1}),
        (IndexError, "outside the cache", {"ids": [5], "length": -3}),
        (ValueError, "logits of 3 rows", {"ids": [5, 6], "logits": 3}),
        (ValueError, "the cache is not", {"ids": [5], "buf": cache.buf[:, :, :, :1]}),
        (ValueError, "the cache is not", {"ids": [5], "buf": cache.rows.contiguous()}),
        (ValueError, "the cache is not", {"ids": [5], "buf": cache.buf.float()}),
        (ValueError, "offsets", {"ids": [5, 6], "tree": (none, torch.tensor([0, 1]))}),
        (
            IndexError,
            "ancestors must be earlier rows",
            {"ids": [5, 6], "tree": (torch.tensor([0, 9, 1]), torch.tensor([0, 1, 3]))},
        ),
        (
            ValueError,
            "must end with itself",
            {"ids": [5, 6], "tree": (torch.tensor([0, 0]), torch.tensor([0, 1, 2]))},
        ),
    ]
    # A cache longer than the rotary tables: positions past them are refused.
    tables = model.cos.shape[0]
    long = torch.zeros((shape.layers, 2, shape.kv_heads, tables + 8, shape.head_dim))
    cases.append(
        (IndexError, "rotary tables", {"ids": [5], "length": tables, "buf": long.bfloat16()})
    )
    for kind, words, args in cases:
        with pytest.raises(kind, match=words):
            forward(**args)
        assert torch.isfinite(forward([5, 6])).all()
    # The Python forward refuses the same ids (on weights packed for it).
    with pytest.raises(IndexError, match="outside the vocabulary"):
        run(_flat(tiny_ggufs["llama"], False).model, cache, [shape.vocab], None, 1)
    with pytest.raises(ValueError, match="packed for the native forward"):
        run(model, cache, [5], None, 1)


def test_bench_perplexity_reports_what_ran_then_fails(
    tiny_ggufs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A method that cannot run (the flat engine, asked for by name, on a YaRN file): the
    others' figures are printed and kept, then one line names the failure, exit status 1."""
    import json

    from samchat.cli import main

    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    out = tmp_path / "ppl.json"
    model = str(tiny_ggufs["yarn"])
    args = ["bench", "perplexity", "--text", str(text), "--model", model, "--json", str(out)]
    # torch/int4, as it was spelt before the flat engine had its name: flat/int4.
    assert main([*args, "--methods", "llamacpp,torch/int4"]) == 1
    captured = capsys.readouterr()
    assert any(line.startswith("llamacpp ") for line in captured.out.splitlines())
    error = captured.err.strip().splitlines()[-1]
    assert error.startswith("error: flat/int4 failed") and "yarn" in error
    kept = json.loads(out.read_text())
    assert set(kept["methods"]) == {"llamacpp"} and set(kept["failed"]) == {"flat/int4"}


def test_the_engine_comparison_skips_what_the_flat_engine_cannot_compute(
    tiny_ggufs: dict[str, Path], tmp_path: Path
) -> None:
    from samchat.models.engine_choice import measure

    said: list[str] = []
    speeds = measure(ModelSpec(source=str(tiny_ggufs["yarn"])), tmp_path, said.append)
    assert [s.label for s in speeds] == ["llamacpp"]
    assert any("flat/int4: skipped" in s and "yarn" in s for s in said)
