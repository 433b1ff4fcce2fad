"""A GGUF file's metadata (its key-value section: architecture, vocabulary, merges, special
tokens, chat template) and its tensor table, read straight from the header: values are skipped
by their lengths unless asked for (a parser that reads every token of a large vocabulary takes
seconds).

The tokenizer converted from a GGUF depends on this section alone, so its digest names the
tokenizer of every copy of a file, wherever it lies and whatever its mtime."""

from __future__ import annotations

import hashlib
import mmap
import struct
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

from samchat.errors import ModelLoadError

_MAGIC = b"GGUF"
# Value type -> size in bytes of one value (GGUF spec); 8 = string, 9 = array.
_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9
# Integer value types (GGUF spec) -> struct format: u8 i8 u16 i16 u32 i32, bool, u64 i64.
_INTS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 7: "<?", 10: "<Q", 11: "<q"}
_FLOATS = {6: "<f", 12: "<d"}  # f32, f64
_ALIGNMENT = 32  # where general.alignment does not say otherwise


class Strings(NamedTuple):
    """An array of strings as read: its length, and its items by index (only the texts
    searched for, where a search names them)."""

    length: int
    items: dict[int, str]


class TensorInfo(NamedTuple):
    """One entry of the tensor table: its name, dimensions (the fastest first, as GGUF lists
    them), ggml type and where its data starts in the file."""

    name: str
    dims: tuple[int, ...]
    kind: int
    at: int


# A value read: a number, a string, or an array of them (an array of strings only as Strings).
Value = int | float | str | list[int] | list[float] | Strings


def conversion_key(gguf: Path) -> str:
    """A converted copy is keyed by the file's identity: where it is, its size and mtime."""
    stat = gguf.stat()
    ident = f"{gguf.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def metadata_digest(path: Path) -> str:
    """sha256 of the header and key-value section of the GGUF file at `path` (hex, 16 chars).
    Milliseconds even for a large vocabulary: the values are skipped by their lengths."""
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            end = _metadata_end(data)
            return hashlib.sha256(data[:end]).hexdigest()[:16]
    except (OSError, ValueError, struct.error, IndexError) as exc:
        raise ModelLoadError(f"cannot read the GGUF header of {path}: {exc}") from exc


def read_metadata(
    path: Path, keys: Collection[str], search: Collection[str] | None = None
) -> dict[str, Value]:
    """The values of `keys` that the GGUF file at `path` holds as integers, strings or arrays
    of them; search: read only the items of a string array equal to one of these texts (a
    search compares bytes where the length matches, rather than decoding every token)."""
    wanted = None if search is None else {t.encode("utf-8") for t in search}
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found, _ = _key_values(data, keys, wanted)
    except (OSError, ValueError, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"cannot read the GGUF header of {path}: {exc}") from exc
    return found


def read_header(path: Path) -> tuple[dict[str, Value], list[TensorInfo]]:
    """Every key's value but the arrays of strings (the vocabulary and merges, whose lengths
    alone are read), and the tensor table."""
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            values, at = _key_values(data, None, set())
            table: list[tuple[str, tuple[int, ...], int, int]] = []
            for _ in range(struct.unpack_from("<Q", data, 8)[0]):
                name_end = _skip_string(data, at)
                name = data[at + 8 : name_end].decode("utf-8")
                n_dims: int = struct.unpack_from("<I", data, name_end)[0]
                dims = struct.unpack_from(f"<{n_dims}Q", data, name_end + 4)
                kind, offset = struct.unpack_from("<IQ", data, name_end + 4 + 8 * n_dims)
                table.append((name, tuple(int(d) for d in dims), int(kind), int(offset)))
                at = name_end + 4 + 8 * n_dims + 12
            size = len(data)
    except (OSError, ValueError, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"cannot read the GGUF header of {path}: {exc}") from exc
    align = values.get("general.alignment", _ALIGNMENT)
    if not isinstance(align, int) or align <= 0:
        raise ModelLoadError(f"cannot read the GGUF header of {path}: alignment {align!r}")
    start = -(-at // align) * align
    tensors = [TensorInfo(name, dims, kind, start + offset) for name, dims, kind, offset in table]
    if any(t.at > size for t in tensors):
        raise ModelLoadError(f"cannot read the GGUF header of {path}: a tensor lies past its end")
    return values, tensors


def _key_values(
    data: mmap.mmap, keys: Collection[str] | None, wanted: set[bytes] | None
) -> tuple[dict[str, Value], int]:
    """The values of `keys` (None: of every key) that _read_value reads, and the offset just
    past the key-value section."""
    found: dict[str, Value] = {}
    at = 24
    for _ in range(_kv_count(data)):
        key_end = _skip_string(data, at)
        key = data[at + 8 : key_end].decode("utf-8")
        kind: int = struct.unpack_from("<I", data, key_end)[0]
        at = key_end + 4
        if keys is None or key in keys:
            value = _read_value(data, at, kind, wanted)
            if value is not None:
                found[key] = value
        at = _skip_value(data, at, kind)
    return found, at


def _read_value(data: mmap.mmap, at: int, kind: int, wanted: set[bytes] | None) -> Value | None:
    if kind in _INTS:
        return int(struct.unpack_from(_INTS[kind], data, at)[0])
    if kind in _FLOATS:
        return float(struct.unpack_from(_FLOATS[kind], data, at)[0])
    if kind == _STRING:
        return data[at + 8 : _skip_string(data, at)].decode("utf-8")
    if kind != _ARRAY:
        return None
    item: int = struct.unpack_from("<I", data, at)[0]
    count: int = struct.unpack_from("<Q", data, at + 4)[0]
    at += 12
    if item in _INTS:
        fmt = _INTS[item]
        return [int(v) for v in struct.unpack_from(f"<{count}{fmt[1]}", data, at)]
    if item in _FLOATS:
        return [float(v) for v in struct.unpack_from(f"<{count}{_FLOATS[item][1]}", data, at)]
    if item != _STRING:
        return None
    if wanted is not None and not wanted:  # no text asked for: the length alone
        return Strings(count, {})
    lengths = None if wanted is None else {len(w) for w in wanted}
    strings: dict[int, str] = {}
    for index in range(count):
        end = _skip_string(data, at)
        if lengths is None or end - at - 8 in lengths:  # compare only where a length matches
            raw = data[at + 8 : end]
            if wanted is None or raw in wanted:
                strings[index] = raw.decode("utf-8")
        at = end
    return Strings(count, strings)


def _kv_count(data: mmap.mmap) -> int:
    if data[:4] != _MAGIC:
        raise ValueError("not a GGUF file")
    version = struct.unpack_from("<I", data, 4)[0]
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    count: int = struct.unpack_from("<Q", data, 16)[0]
    return count


def _metadata_end(data: mmap.mmap) -> int:
    """The offset just past the last key-value pair (where the tensor table begins)."""
    at = 24
    for _ in range(_kv_count(data)):
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
