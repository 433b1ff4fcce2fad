"""Packing at first load streams: a tiny Q4_K_M GGUF (4-bit and 8-bit K-quant linears, a tied
Q6_K embedding) packed a few rows at a time into the kept file, which holds the layout of the
forward that reads it and nothing else, mapped without copies; its logits equal a packing of
the whole model at once, rows exact. Progress is reported layer by layer; a pack stopped by
Ctrl-C or killed leaves no file; a foreign or damaged kept file is packed again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from samchat.engines.flat import packed, packfile, quant
from samchat.engines.flat.engine import FlatEngine
from samchat.engines.flat.forward import FlatModel
from samchat.engines.flat.gguf_weights import read_gguf
from samchat.engines.flat.native import SWITCH
from tests.engines.flat.test_types import _rows_exact
from tests.terminal import as_from_a_terminal

LAYERS = 3
IDS = [5, 9, 300, 1200, 77, 2000, 3, 64] * 4


@pytest.fixture(scope="module")
def q4km(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from scripts.gguf_variants import tiny_variants

    return tiny_variants(tmp_path_factory.mktemp("packing"), ["Q4_K_M"], layers=LAYERS)["Q4_K_M"]


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedding and output projection read 64 rows at a time (several chunks)."""
    monkeypatch.setattr(packed, "CHUNK_VALUES", 64 * 256)


def _logits(model: FlatModel) -> Any:
    return FlatEngine(SimpleNamespace(model=model)).prefill(IDS, logits=len(IDS))


def _kept(cache: Path) -> list[Path]:
    folder = cache / "packed"
    return sorted(folder.iterdir()) if folder.is_dir() else []


def test_the_kept_file_holds_the_native_tiles_alone(
    q4km: Path, tmp_path: Path, small_chunks: None
) -> None:
    """Every linear as quant.tiles makes it from the whole file's tensors, nothing of torch's
    layout, every tensor a 64-byte aligned view of the mapped file; the logits equal those of
    the same model packed whole in memory, and every row of a verification its step."""
    model = packed.load_flat(q4km, "tiny", "int4", tmp_path)
    assert model.forward == "native" and model.native is not None
    [kept] = _kept(tmp_path)
    assert "-native-" in kept.name
    assert not [k for k in model.tensors if k.endswith((".w", ".s"))]
    shape, whole = read_gguf(q4km)
    for i in range(LAYERS):
        for name, parts in (("qkv", ("q", "k", "v")), ("gu", ("gate", "up")), ("down", ("down",))):
            kind, tiles = quant.tiles([whole[f"{i}.{p}"] for p in parts])
            assert int(model.tensors[f"{i}.{name}.kind"][0]) == kind
            for key, t in tiles.items():
                assert torch.equal(model.tensors[f"{i}.{name}.{key}"], t), (i, name, key)
    kind, tiles = quant.output_tiles(whole["embed"])
    assert int(model.tensors["out.kind"][0]) == kind
    for key, t in tiles.items():
        assert torch.equal(model.tensors[f"out.{key}"], t), key
    held = {k: v for k, v in quant.Embedding.of(whole["embed"]).tensors().items()}
    for key, t in held.items():
        assert torch.equal(model.tensors[key], t), key
    assert all(t.data_ptr() % packfile.ALIGN == 0 for t in model.tensors.values() if t.numel())
    at_once = packfile.MemorySink()
    packed.convert(shape, whole, "int4", at_once)
    assert at_once.keys() == model.tensors.keys()
    reference = FlatModel("int4", shape, dict(at_once), "whole", "native")
    reference.go_native(tmp_path, lambda _: None)
    assert np.array_equal(_logits(model), _logits(reference))
    _rows_exact(model)


def test_the_python_forward_gets_torchs_layout_alone(
    q4km: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_chunks: None
) -> None:
    monkeypatch.setenv(SWITCH, "0")
    said: list[str] = []
    model = packed.load_flat(q4km, "tiny", "int4", tmp_path, said.append)
    assert model.forward == "python" and model.native is None
    [kept] = _kept(tmp_path)
    assert "-python-" in kept.name
    assert not [k for k in model.tensors if k.endswith((".kind", ".t4", ".t8", ".ts"))]
    shape, whole = read_gguf(q4km)
    at_once = packfile.MemorySink()
    packed.convert(shape, whole, "int4", at_once, "python")
    for key, t in at_once.items():
        assert torch.equal(model.tensors[key], t), key
    assert np.array_equal(_logits(model), _logits(FlatModel("int4", shape, dict(at_once), "")))


def test_progress_is_shown_layer_by_layer(
    q4km: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    packed.load_flat(q4km, "tiny", "int4", tmp_path / "a", said.append)
    layers = [s for s in said if ": layer " in s]
    assert layers and layers[-1] == f"packing tiny: layer {LAYERS} of {LAYERS}"
    monkeypatch.setattr(packed, "PROGRESS_S", 0.0)
    said.clear()
    packed.load_flat(q4km, "tiny", "int4", tmp_path / "b", said.append)
    layers = [s for s in said if ": layer " in s]
    assert layers == [f"packing tiny: layer {i} of {LAYERS}" for i in range(1, LAYERS + 1)]
    assert said.index(layers[0]) > said.index(
        "packing tiny as int4 for this CPU (" + packed.cpu_capability() + "; once)"
    )


def test_a_pack_stopped_midway_leaves_no_file(
    q4km: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between two layers: KeyboardInterrupt goes on up, and nothing is left in the
    cache's packed folder; the next load packs whole."""
    monkeypatch.setattr(packed, "PROGRESS_S", 0.0)

    def stop(text: str) -> None:
        if text.endswith(f"layer 2 of {LAYERS}"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        packed.load_flat(q4km, "tiny", "int4", tmp_path, stop)
    assert _kept(tmp_path) == []
    model = packed.load_flat(q4km, "tiny", "int4", tmp_path)
    assert len(_kept(tmp_path)) == 1 and model.about.startswith("packed into")


CHILD = """
import os, sys, time
from pathlib import Path
from samchat.engines.flat import packed
packed.PROGRESS_S = 0.0
def say(text):
    print(text, flush=True)
    if ": layer " in text:
        if sys.argv[3] == "kill":
            os.kill(os.getpid(), 9)
        time.sleep(30)  # the parent's Ctrl-C lands here
packed.load_flat(Path(sys.argv[1]), "tiny", "int4", Path(sys.argv[2]), say)
"""


@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_a_process_stopped_while_packing_leaves_no_file(
    q4km: Path, tmp_path: Path, how: str
) -> None:
    """A real process: Ctrl-C (SIGINT) while it packs ends it at once, or it is killed
    outright; either way no file of the packing remains."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(q4km), str(tmp_path), how],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    assert child.stdout is not None
    for line in child.stdout:
        if ": layer " in line:
            break
    if how == "ctrl-c":
        sent = time.monotonic()
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
        assert time.monotonic() - sent < 10, "Ctrl-C did not stop the packing"
        assert "KeyboardInterrupt" in err
    else:
        child.communicate(timeout=60)
        assert child.returncode == -signal.SIGKILL
    assert _kept(tmp_path) == []


def test_a_dead_packers_named_file_is_swept(q4km: Path, tmp_path: Path) -> None:
    """Where the file system has no unnamed files, a packing writes under a name with its
    process id: a file left by a process that has ended is removed at the next packing; a
    live one's is left alone."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    folder = tmp_path / "packed"
    folder.mkdir()
    stale = folder / f".packing-{gone.stdout.strip()}-abc"
    stale.write_bytes(b"half")
    live = folder / f".packing-{os.getpid()}-def"
    live.write_bytes(b"mine")
    packed.load_flat(q4km, "tiny", "int4", tmp_path)
    assert not stale.exists() and live.exists()


@pytest.mark.parametrize("damage", ["cut", "magic", "index", "outside"])
def test_a_damaged_or_foreign_kept_file_is_packed_again(
    q4km: Path, tmp_path: Path, damage: str
) -> None:
    model = packed.load_flat(q4km, "tiny", "int4", tmp_path)
    [kept] = _kept(tmp_path)
    data = kept.read_bytes()
    if damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "magic":
        data = data[:-8] + b"safetens"
    elif damage == "index":
        data = data[:-100] + b"x" * 84 + data[-16:]
    else:  # a tensor placed past the data
        meta = {**packed._key(packed.file_identity(q4km), "int4", "native")}
        tensors = {"norm": model.tensors["norm"]}
        packfile.write_all(kept, tensors.items(), {**meta, "shape": model.shape.to_json()})
        data = kept.read_bytes().replace(b'"at": 0', b'"at": 640000')
    damaged = kept.with_name("damaged")
    damaged.write_bytes(data)
    damaged.replace(kept)  # a new file: the model above maps the old one
    said: list[str] = []
    again = packed.load_flat(q4km, "tiny", "int4", tmp_path, said.append)
    notices = [s for s in said if "unusable" in s]
    assert len(notices) == 1 and "\n" not in notices[0], said
    assert again.about.startswith("packed into")
    assert np.array_equal(_logits(again), _logits(model))


def _mapping_of(address: int) -> tuple[str, dict[str, str]]:
    """The path (empty: anonymous memory) and smaps fields of this process's mapping that
    holds `address`."""
    found: tuple[str, dict[str, str]] | None = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if "-" in head[0] and ":" not in head[0]:
            low, high = (int(x, 16) for x in head[0].split("-"))
            if found is not None:
                return found
            if low <= address < high:
                found = (head[5] if len(head) > 5 else "", {})
        elif found is not None and ":" in head[0]:
            found[1][head[0].rstrip(":")] = head[1]
    assert found is not None, hex(address)
    return found


def test_the_tiles_are_read_into_huge_pages_and_the_rest_stays_mapped(
    q4km: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part of a tiled linear (read whole by every step) is read from the kept file into
    anonymous memory advised to take huge pages, where the system offers them; the embedding's
    table (looked up a row at a time) stays a view of the file's map. Where huge pages are not
    offered, or the memory is refused or runs over its budget, every tensor is a view of the
    map.
    The logits are the same every way."""
    from samchat.engines.flat import hugepages

    # Whether the kernel itself gives huge pages to advised memory (the setting the test plays
    # below only decides whether samchat asks).
    kernel_gives = hugepages.offered()
    setting = tmp_path / "enabled"
    monkeypatch.setattr(hugepages, "_SETTING", setting)
    logits = []
    anonymous = hugepages._anonymous

    def no_room(nbytes: int) -> Any:
        raise OSError(12, "Cannot allocate memory")

    for chosen, budget, copied, allocate in (
        ("always [madvise] never", 1e9, True, anonymous),
        ("always [madvise] never", 0.0, False, anonymous),  # a host slower than the budget
        ("always [madvise] never", 1e9, False, no_room),
        ("always madvise [never]", 1e9, False, anonymous),
    ):
        setting.write_text(chosen + "\n")
        monkeypatch.setattr(hugepages, "BUDGET_S_PER_GB", budget)
        monkeypatch.setattr(hugepages, "_anonymous", allocate)
        model = packed.load_flat(q4km, "tiny", "int4", tmp_path)
        [kept] = _kept(tmp_path)
        for name, t in model.tensors.items():
            if not t.numel():
                continue
            path, fields = _mapping_of(t.data_ptr())
            if copied and quant.is_tile_part(name):
                assert path == "", name
                assert fields.get("THPeligible") == ("1" if kernel_gives else "0"), name
            elif name.startswith("embed.") or quant.is_tile_part(name):
                assert path == str(kept), name
        assert any(quant.is_tile_part(k) for k in model.tensors)
        assert all(t.data_ptr() % packfile.ALIGN == 0 for t in model.tensors.values() if t.numel())
        logits.append(_logits(model))
    assert all(np.array_equal(logits[0], other) for other in logits[1:])
    setting.write_text("[always] madvise never\n")
    assert hugepages.offered()
    setting.unlink()
    assert not hugepages.offered()  # no such setting: no huge pages asked for
