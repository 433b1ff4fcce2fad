"""Corrupting the static index: random bytes in a segment file, or the file cut short; each
must be detected where it touches checked bytes, and the index rebuilt from the store."""

from __future__ import annotations

import json
import random
import shutil
import struct
from pathlib import Path

from fault_campaign.figures import Figures
from fault_campaign.texts import FP, encode
from samchat.corpus.indexing import IndexManager
from samchat.errors import IndexCorruptError
from samchat.sam.index import StaticIndex
from samchat.store import Store

_PREFIX = struct.Struct("<8sIII")


def _covered(path: Path) -> list[tuple[int, int]]:
    """Byte ranges of a segment file that its checksums cover: header and arrays."""
    raw = path.read_bytes()
    _magic, _version, hlen, _crc = _PREFIX.unpack_from(raw, 0)
    header = json.loads(raw[_PREFIX.size : _PREFIX.size + hlen])
    spans = [(0, _PREFIX.size + hlen)]
    width = {"i32": 4, "u16": 2}
    for e in header["arrays"]:
        spans.append((int(e["offset"]), int(e["offset"]) + width[e["type"]] * int(e["count"])))
    return spans


def index_corruption(trials: int, work: Path, base: Path, rng: random.Random) -> Figures:
    fig = Figures("corruption: static index segments (random bytes 75%, truncation 25%)")
    segments = sorted((base / "index" / FP).glob("seg-*.sam"))
    covered = {s.name: _covered(s) for s in segments}
    db = work / "index-db" / "samchat.db"
    db.parent.mkdir(parents=True)
    shutil.copy(base / "samchat.db", db)
    with Store.open(db) as store:
        want = store.index_keys()
        for k in range(trials):
            root = work / f"index-corrupt-{k}"
            shutil.copytree(base / "index", root)
            seg = root / FP / rng.choice(segments).name
            data = bytearray(seg.read_bytes())
            if rng.random() < 0.25:
                start, end = rng.randrange(0, len(data)), len(data)
                del data[start:]
            else:
                n = rng.randint(1, 64)
                start = rng.randrange(0, len(data) - n)
                end = start + n
                old = bytes(data[start:end])
                new = bytes(rng.randrange(256) for _ in range(n))
                data[start:end] = new
                if new == old:
                    end = start  # nothing changed
            seg.write_bytes(bytes(data))
            fig.injected += 1
            try:
                StaticIndex.open(root / FP, FP, 0).close()
            except IndexCorruptError:
                fig.detected += 1
            else:
                hit = any(a < end and start < b for a, b in covered[seg.name])
                if hit:
                    fig.silent += 1
                    fig.note(f"trial {k}: bytes {start}-{end} of {seg.name} not detected")
                else:
                    fig.harmless += 1
            manager = IndexManager(store, FP, encode, 0, root=root)
            manager.open()  # rebuilds a corrupt index from the store
            if manager.index.document_ids() == want:
                fig.recovered += 1
            else:
                fig.note(f"trial {k}: the rebuilt index does not match the store")
            manager.close()
            shutil.rmtree(root)
    return fig
