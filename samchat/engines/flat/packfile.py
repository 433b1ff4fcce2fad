"""The kept packed file: tensors written one at a time as they are converted, each at a 64-byte
aligned offset (the kernels load packed weights with aligned vector loads), then an index
(a JSON object: the key it was packed under and each tensor's type, shape and place) and a
trailer (the index's length and a magic). Read back as views of one private memory map, so
that mapping copies nothing and only the pages a forward reads become resident; the tensors a
step reads whole may be read into huge pages instead (hugepages.py).

The file is built where no other process sees it (an unnamed file where the system has them,
else a temporary name with the writer's process id) and moved into place whole: a packing
stopped at any point leaves no half file behind."""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Protocol

import torch

from samchat.engines.flat import hugepages

ALIGN = 64
MAGIC = b"samflat1"
_TRAILER = 16  # the index's length (8 bytes, little-endian), then MAGIC
DTYPES = {
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
_NAMES = {v: k for k, v in DTYPES.items()}
_TEMP = ".packing-"


class Region(Protocol):
    def write(self, rows: torch.Tensor) -> None:
        """The next rows of the tensor (its first dimension), in order."""
        ...


class Sink(Protocol):
    """Where converted tensors go: the kept file, or a dict in memory."""

    def allocate(self, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> Region: ...

    def put(self, name: str, t: torch.Tensor) -> None: ...


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * torch.empty(0, dtype=dtype).element_size()


def _raw(t: torch.Tensor) -> memoryview:
    return t.contiguous().view(-1).view(torch.uint8).numpy().data


class _FileRegion:
    def __init__(self, fd: int, at: int, size: int, name: str) -> None:
        self.fd, self.at, self.end, self.name = fd, at, at + size, name

    def write(self, rows: torch.Tensor) -> None:
        data = _raw(rows)
        if self.at + len(data) > self.end:
            raise ValueError(f"more rows written to {self.name} than it has")
        while data:
            done = os.pwrite(self.fd, data, self.at)
            self.at += done
            data = data[done:]


class PackWriter:
    """Writes a packed file tensor by tensor; finish() gives it its index and moves it to
    `path` atomically. Left without finish() (an error, a Ctrl-C), nothing remains."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        sweep(path.parent)
        self._fd, self._temp = _open_unseen(path.parent)
        self._end = 0
        self._index: dict[str, dict[str, object]] = {}
        self._regions: list[_FileRegion] = []
        self._done = False

    def allocate(self, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> _FileRegion:
        if name in self._index:
            raise ValueError(f"{name} is packed twice")
        size = _nbytes(dtype, shape)
        at = self._end
        self._index[name] = {"dtype": _NAMES[dtype], "shape": list(shape), "at": at}
        self._end = -(-(at + size) // ALIGN) * ALIGN  # the next tensor starts aligned
        region = _FileRegion(self._fd, at, size, name)
        self._regions.append(region)
        return region

    def put(self, name: str, t: torch.Tensor) -> None:
        self.allocate(name, t.dtype, tuple(t.shape)).write(t)

    def finish(self, meta: dict[str, str]) -> None:
        short = [r.name for r in self._regions if r.at != r.end]
        if short:
            raise ValueError(f"{short[0]} was not written whole")
        index = json.dumps({"meta": meta, "tensors": self._index}).encode()
        tail = index + len(index).to_bytes(8, "little") + MAGIC
        os.pwrite(self._fd, tail, self._end)
        if self._temp is None:  # an unnamed file: given a name only now, whole
            named = self.path.with_name(f"{_TEMP}{os.getpid()}-{self.path.name}")
            named.unlink(missing_ok=True)
            procfd = os.open("/proc/self/fd", os.O_RDONLY)
            try:  # linkat(..., AT_SYMLINK_FOLLOW): the link names the file itself
                os.link(str(self._fd), named, src_dir_fd=procfd, follow_symlinks=True)
            finally:
                os.close(procfd)
            self._temp = named
        os.replace(self._temp, self.path)
        self._done = True

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)
        if not self._done and self._temp is not None:
            self._temp.unlink(missing_ok=True)

    def __enter__(self) -> PackWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _open_unseen(folder: Path) -> tuple[int, Path | None]:
    """A file to write in `folder`: unnamed where the system makes them (the kernel drops it
    if the process ends first), else named with this process's id (see sweep)."""
    flag = getattr(os, "O_TMPFILE", 0)
    if flag and Path("/proc/self/fd").is_dir():
        with contextlib.suppress(OSError):  # a file system without them
            return os.open(folder, flag | os.O_RDWR, 0o600), None
    fd, name = tempfile.mkstemp(prefix=f"{_TEMP}{os.getpid()}-", dir=folder)
    return fd, Path(name)


def sweep(folder: Path) -> None:
    """Removes the named temporary files of packings whose process has ended (killed before
    it could remove them)."""
    for temp in folder.glob(f"{_TEMP}*"):
        pid = temp.name.removeprefix(_TEMP).split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            with contextlib.suppress(OSError):
                temp.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


class MemoryRegion:
    def __init__(self, t: torch.Tensor) -> None:
        self.t, self.at = t, 0

    def write(self, rows: torch.Tensor) -> None:
        self.t[self.at : self.at + rows.shape[0]] = rows
        self.at += rows.shape[0]


class MemorySink(dict[str, torch.Tensor]):
    """The converted tensors kept in memory (where there is no cache to keep a file in)."""

    def allocate(self, name: str, dtype: torch.dtype, shape: tuple[int, ...]) -> MemoryRegion:
        self[name] = torch.empty(shape, dtype=dtype)
        return MemoryRegion(self[name])

    def put(self, name: str, t: torch.Tensor) -> None:
        self[name] = t


def read(
    path: Path, huge: Callable[[str], bool] | None = None
) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """The key a file was packed under and its tensors, views of a private map of the file;
    ValueError when it is not a whole packed file. The tensors `huge` names are read into
    memory in huge pages instead, where the system offers them (hugepages.py)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < _TRAILER:
            raise ValueError("it is cut short")
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        if mapped[-len(MAGIC) :] != MAGIC:
            raise ValueError("it is cut short or not a packed file")
        length = int.from_bytes(mapped[-_TRAILER : -len(MAGIC)], "little")
        start = size - _TRAILER - length
        if start < 0:
            raise ValueError("its index is damaged")
        index = json.loads(mapped[start : size - _TRAILER])
        tensors: dict[str, torch.Tensor] = {}
        pieces: list[hugepages.Piece] = []
        for name, entry in index["tensors"].items():
            dtype, shape, at = DTYPES[entry["dtype"]], tuple(entry["shape"]), int(entry["at"])
            nbytes = _nbytes(dtype, shape)
            if at % ALIGN or at < 0 or at + nbytes > start:
                raise ValueError(f"its index places {name} outside the file")
            if nbytes == 0:
                tensors[name] = torch.empty(shape, dtype=dtype)
            else:
                pieces.append(hugepages.Piece(name, dtype, shape, at, nbytes))
        copied = [p for p in pieces if huge is not None and huge(p.name)]
        if copied and hugepages.offered():
            tensors |= hugepages.read_into_huge(f.fileno(), copied) or {}
        tensors |= {p.name: p.view_in(mapped, p.at) for p in pieces if p.name not in tensors}
    return dict(index["meta"]), {name: tensors[name] for name in index["tensors"]}


def write_all(
    path: Path, tensors: Iterable[tuple[str, torch.Tensor]], meta: dict[str, str]
) -> None:
    """A packed file of `tensors` at once (tests write foreign files with it)."""
    with PackWriter(path) as writer:
        for name, t in tensors:
            writer.put(name, t)
        writer.finish(meta)
