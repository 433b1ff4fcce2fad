"""A GGUF file's metadata (its key-value section: architecture, vocabulary, merges, special
tokens, chat template), read straight from the header without parsing the values.

The tokenizer converted from a GGUF depends on this section alone, so its digest names the
tokenizer of every copy of a file, wherever it lies and whatever its mtime."""

from __future__ import annotations

import hashlib
import mmap
import struct
from pathlib import Path

from samchat.errors import ModelLoadError

_MAGIC = b"GGUF"
# Value type -> size in bytes of one value (GGUF spec); 8 = string, 9 = array.
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


def metadata_digest(path: Path) -> str:
    """sha256 of the header and key-value section of the GGUF file at `path` (hex, 16 chars).
    Milliseconds even for a large vocabulary: the values are skipped by their lengths."""
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            end = _metadata_end(data)
            return hashlib.sha256(data[:end]).hexdigest()[:16]
    except (OSError, ValueError, struct.error, IndexError) as exc:
        raise ModelLoadError(f"cannot read the GGUF header of {path}: {exc}") from exc


def _metadata_end(data: mmap.mmap) -> int:
    """The offset just past the last key-value pair (where the tensor table begins)."""
    if data[:4] != _MAGIC:
        raise ValueError("not a GGUF file")
    version = struct.unpack_from("<I", data, 4)[0]
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    kv_count: int = struct.unpack_from("<Q", data, 16)[0]
    at = 24
    for _ in range(kv_count):
        at = _skip_string(data, at)  # the key
        kind: int = struct.unpack_from("<I", data, at)[0]
        at = _skip_value(data, at + 4, kind)
    return at


def _skip_string(data: mmap.mmap, at: int) -> int:
    length: int = struct.unpack_from("<Q", data, at)[0]
    end = at + 8 + length
    if end > len(data):
        raise ValueError("a string runs past the end of the file")
    return end


def _skip_value(data: mmap.mmap, at: int, kind: int) -> int:
    if kind in _SIZES:
        return at + _SIZES[kind]
    if kind == _STRING:
        return _skip_string(data, at)
    if kind == _ARRAY:
        item: int = struct.unpack_from("<I", data, at)[0]
        count: int = struct.unpack_from("<Q", data, at + 4)[0]
        at += 12
        if item in _SIZES:
            return at + count * _SIZES[item]
        for _ in range(count):
            at = _skip_value(data, at, item)
        return at
    raise ValueError(f"unknown GGUF value type {kind}")
