"""The segment file of the static index (index.py): one frozen suffix automaton over a run of
documents, in a little header and raw arrays (no pickle), written once and never changed.

    8 bytes  magic b"SAMIDX\\0\\1"
    4 bytes  format version (u32, little-endian)
    4 bytes  header length H (u32)
    4 bytes  crc32 of the header (u32)
    H bytes  UTF-8 JSON header: fingerprint, separator, byte order, counts, documents
             (id, serial, start, end), and for every array its name, type, offset, item count
             and crc32
    arrays   native-order int32, or uint16 for token arrays when every id fits; each at an
             8-byte aligned offset (layout: see samchat/sam/automaton.py)

Reading maps the file and checks its header, sizes and checksums (`read_segment`); copy_i32 and
copy_i16 later copy its arrays into the process for faster queries (StaticIndex.warm).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from librt.vecs import extend as vec_extend
from librt.vecs import vec
from mypy_extensions import i16, i32

from samchat.errors import IndexCorruptError, SamchatError
from samchat.sam import impl

if TYPE_CHECKING:
    from samchat.sam.automaton import Automaton, DeadSpans, SuffixAutomaton

MAGIC = b"SAMIDX\x00\x01"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sIII")
_ALIGN = 8
# Arrays of token ids, stored as uint16 when every id fits.
NARROW = frozenset({"text", "etok", "hub_tok"})
# Stored type -> (memoryview format, bytes per item).
_ITEM = {"i32": ("i", 4), "u16": ("H", 2)}
# States (< 2 per token) and positions are int32.
MAX_SEGMENT_TOKENS = (1 << 30) - 1
# Checksums of big arrays run in threads: zlib releases the GIL.
_PARALLEL_CRC_BYTES = 1 << 24
_COPY_CHUNK = 1 << 20  # items per memcpy; between chunks other threads get the GIL


@dataclass
class DocSpan:
    doc_id: str
    serial: int
    start: int
    end: int  # exclusive; the separator follows at `end`


@dataclass
class Segment:
    name: str
    sam: Automaton
    docs: list[DocSpan]
    nbytes: int
    mapping: mmap.mmap | None
    dead: DeadSpans
    views: list[memoryview] | None  # the mapped arrays until warm() copies them


def _crc(buf: memoryview | bytes) -> int:
    return zlib.crc32(buf) & 0xFFFFFFFF


def _crc_many(views: list[memoryview]) -> list[int]:
    total = sum(v.nbytes for v in views)
    if total < _PARALLEL_CRC_BYTES:
        return [_crc(v) for v in views]
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        return list(pool.map(_crc, views))


def copy_i32(view: memoryview) -> vec[i32]:
    out = vec[i32](capacity=len(view))
    for a in range(0, len(view), _COPY_CHUNK):
        out = vec_extend(out, view[a : a + _COPY_CHUNK])
        time.sleep(0)
    return out


def copy_i16(view: memoryview) -> vec[i16]:
    out = vec[i16](capacity=len(view))
    for a in range(0, len(view), _COPY_CHUNK):
        out = vec_extend(out, view[a : a + _COPY_CHUNK])
        time.sleep(0)
    return out


def write_segment(
    path: Path, sam: SuffixAutomaton, docs: list[DocSpan], fingerprint: str, separator: int
) -> int:
    """Write a frozen automaton as a segment file; returns its size in bytes."""
    blobs: list[memoryview] = []
    entries: list[dict[str, Any]] = []
    for name, buf in sam.arrays():
        # Token arrays come as int16 when every id fits in 16 bits: stored as uint16.
        kind = "u16" if buf.format == "h" else "i32"
        blobs.append(buf)
        entries.append(
            {"name": name, "type": kind, "count": len(buf), "crc": _crc(buf), "offset": 0}
        )
    header: dict[str, Any] = {
        "fingerprint": fingerprint,
        "separator": separator,
        "byteorder": sys.byteorder,
        "n_tokens": sam.n_tokens,
        "n_states": sam.n_states,
        "docs": [[d.doc_id, d.serial, d.start, d.end] for d in docs],
        "arrays": entries,
    }
    # Offsets depend on the header length, which depends on the offsets' digits: lay out
    # until it stops changing.
    for _ in range(3):
        raw = json.dumps(header, separators=(",", ":")).encode()
        pos = _PREFIX.size + len(raw)
        for entry in entries:
            pos = (pos + _ALIGN - 1) // _ALIGN * _ALIGN
            entry["offset"] = pos
            pos += _ITEM[entry["type"]][1] * entry["count"]
    raw = json.dumps(header, separators=(",", ":")).encode()
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(raw), _crc(raw)))
        f.write(raw)
        for entry, blob in zip(entries, blobs, strict=True):
            here = f.tell()
            if here > entry["offset"]:  # pragma: no cover - the loop above converges
                raise SamchatError("internal error: segment layout did not converge")
            f.write(b"\0" * (entry["offset"] - here))
            f.write(blob)
        size = f.tell()
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return size


def read_segment(path: Path, fingerprint: str, separator: int) -> Segment:
    """Memory-map a segment file, checking its header, size and checksums."""
    where = f"static index segment {path}"
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _PREFIX.size:
                raise IndexCorruptError(f"{where} is truncated; rebuild the index")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        msg = f"{where} cannot be read ({exc.strerror}); rebuild the index"
        raise IndexCorruptError(msg) from exc
    ok = False
    try:
        magic, version, hlen, hcrc = _PREFIX.unpack_from(mm, 0)
        if magic != MAGIC:
            raise IndexCorruptError(f"{where} is not a samchat index file; rebuild the index")
        if version != FORMAT_VERSION:
            raise IndexCorruptError(
                f"{where} has format version {version}, this samchat reads {FORMAT_VERSION}; "
                "rebuild the index"
            )
        if _PREFIX.size + hlen > size:
            raise IndexCorruptError(f"{where} is truncated; rebuild the index")
        raw = mm[_PREFIX.size : _PREFIX.size + hlen]
        if _crc(raw) != hcrc:
            raise IndexCorruptError(f"{where} has a corrupt header; rebuild the index")
        try:
            header = json.loads(raw)
            if header["fingerprint"] != fingerprint:
                raise IndexCorruptError(
                    f"{where} was built with another tokenizer; rebuild the index"
                )
            if header["separator"] != separator:
                raise IndexCorruptError(
                    f"{where} was built with another separator token; rebuild the index"
                )
            if header["byteorder"] != sys.byteorder:
                raise IndexCorruptError(
                    f"{where} was written on a machine of another byte order; rebuild the index"
                )
            entries = header["arrays"]
            names = [e["name"] for e in entries]
            docs = [DocSpan(str(d[0]), int(d[1]), int(d[2]), int(d[3])) for d in header["docs"]]
            spans = [
                (int(e["offset"]), int(e["count"]), int(e["crc"]), _ITEM[e["type"]])
                for e in entries
            ]
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise IndexCorruptError(f"{where} has an unreadable header; rebuild the index") from exc
        if tuple(names) != impl.ARRAY_NAMES or any(
            fmt == "H" and name not in NARROW
            for name, (*_, (fmt, _w)) in zip(names, spans, strict=True)
        ):
            raise IndexCorruptError(f"{where} has an unexpected layout; rebuild the index")
        whole = memoryview(mm)
        views: list[memoryview] = []
        for offset, count, _, (fmt, width) in spans:
            if offset < 0 or count < 0 or offset % _ALIGN or offset + width * count > size:
                raise IndexCorruptError(f"{where} is truncated; rebuild the index")
            part = whole[offset : offset + width * count]
            views.append(part.cast("H") if fmt == "H" else part.cast("i"))
        for (_, _, want, _), got, name in zip(spans, _crc_many(views), names, strict=True):
            if want != got:
                raise IndexCorruptError(
                    f"{where} is corrupt (checksum of {name} differs); rebuild the index"
                )
        n_tok, n_st = len(views[0]), len(views[2])
        if (
            n_tok != header.get("n_tokens")
            or n_st != header.get("n_states")
            or any(len(views[i]) != n_st for i in (1, 3, 4))
            or len(views[5]) != n_st + 1
            or len(views[6]) != len(views[7])
            or len(views[9]) != len(views[10])
            or len(views[9]) != impl.HUB_K * len(views[8])
        ):
            raise IndexCorruptError(f"{where} has inconsistent array sizes; rebuild the index")
        sam = impl.MappedAutomaton(views)
        ok = True
        return Segment(path.name, sam, docs, size, mm, impl.DeadSpans(), views)
    finally:
        if not ok:
            # Views still alive keep the map; it closes when they are collected.
            with contextlib.suppress(BufferError):
                mm.close()
