"""The static index's directory (see samchat/sam/index.py): its manifest, the lock every write
holds, the segments adopted from it and published to it, and the documents live in them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import threading
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from samchat.errors import IndexCorruptError, SamchatError
from samchat.sam import impl
from samchat.sam.segments import (
    DocSpan,
    Segment,
    read_segment,
)

if TYPE_CHECKING:
    from samchat.sam.automaton import (
        DeadSpans,
        MultiCursor,
        SuffixAutomaton,
    )

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
# Held by whoever writes index files; the holder deletes it before releasing (see _locked).
LOCK_FILE = "index.lock"
_SEGMENT_NAME = re.compile(r"seg-(\d+)\.sam")
# Above this many segments flush() merges the smallest ones.
MAX_SEGMENTS = 8
# Tokens per compiled extend call (~20 ms): between calls other threads get the GIL.
_EXTEND_CHUNK = 1 << 14

if TYPE_CHECKING:
    IndexCursor = MultiCursor
else:
    IndexCursor = impl.MultiCursor


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


Stamp = tuple[int, int, int, int, int]


def _stamp(st: os.stat_result) -> Stamp:
    # The manifest is only ever replaced, never rewritten in place: a new file is a new inode.
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


@dataclass
class Manifest:
    uid: str  # new for every created or recreated index; "" in manifests of older samchat
    segments: list[str]
    removed: set[int]
    next_serial: int
    next_segment: int


def read_manifest(directory: Path, fingerprint: str, separator: int) -> tuple[Manifest, Stamp]:
    """Parse and check `manifest.json`; FileNotFoundError when there is none."""
    path = directory / MANIFEST
    where = f"static index manifest {path}"
    try:
        with open(path, "rb") as f:
            stamp = _stamp(os.fstat(f.fileno()))
            raw = f.read()
        data = json.loads(raw.decode("utf-8"))
        fmt = data["format"]
        manifest = Manifest(
            uid=str(data.get("uid", "")),
            segments=[str(s) for s in data["segments"]],
            removed={int(x) for x in data["removed"]},
            next_serial=int(data["next_serial"]),
            next_segment=int(data["next_segment"]),
        )
        old_fp = str(data["fingerprint"])
        old_sep = int(data["separator"])
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise IndexCorruptError(f"{where} is unreadable; rebuild the index") from exc
    if fmt != MANIFEST_FORMAT:
        raise IndexCorruptError(f"{where} has format {fmt}; rebuild the index")
    if old_fp != fingerprint:
        raise IndexCorruptError(
            f"static index in {directory} was built with another tokenizer; rebuild the index"
        )
    if old_sep != separator:
        raise IndexCorruptError(
            f"static index in {directory} uses separator {old_sep}, not {separator}; "
            "rebuild the index"
        )
    return manifest, stamp


def _next_free_segment(directory: Path) -> int:
    """One past the highest segment number used in the directory, so a name is never reused
    for other contents (another process may still map the old file)."""
    top = -1
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        top = int(json.loads((directory / MANIFEST).read_bytes())["next_segment"]) - 1
    with contextlib.suppress(OSError):
        for p in directory.iterdir():
            m = _SEGMENT_NAME.fullmatch(p.name)
            if m:
                top = max(top, int(m.group(1)))
    return top + 1


# Indexes not closed yet (weakly held): tests check that none is left behind.
_OPEN: weakref.WeakSet[IndexFiles] = weakref.WeakSet()


def open_indexes() -> list[Path]:
    """The directories of the indexes that are open (not closed, still referenced)."""
    return [index.directory for index in list(_OPEN)]


def close_all(keep: set[Path] | None = None) -> None:
    """Close every open index (but those in the directories `keep`)."""
    for index in list(_OPEN):
        if not keep or index.directory not in keep:
            index.close()


class IndexFiles:
    """The segments of one index directory as this process knows them, and their live documents."""

    def __init__(
        self,
        directory: Path,
        fingerprint: str,
        separator: int,
        segments: list[Segment],
        removed: set[int],
        next_serial: int,
        next_segment: int,
    ) -> None:
        self.directory = directory
        self.fingerprint = fingerprint
        self.separator = separator
        self.segments = segments
        self.removed = removed
        self.next_serial = next_serial
        self.next_segment = next_segment
        self._tail: SuffixAutomaton = impl.SuffixAutomaton()
        self._tail_docs: list[DocSpan] = []
        self._tail_dead: DeadSpans = impl.DeadSpans()
        # doc id -> serials of its live copies: membership tests stay O(1) as documents pile up
        # (serials survive flushes and merges, so only add, remove and refresh change this map).
        self._live: dict[str, set[int]] = {}
        # What this process last read or wrote: refresh() compares against it.
        self._uid = ""
        self._seen: tuple[str, tuple[str, ...], frozenset[int], int, int] | None = None
        self._stamp: Stamp | None = None
        self._lock_depth = 0
        self._lock_owner = 0
        self._rebuild_live()
        _OPEN.add(self)

    def _load(self) -> bool:
        """Adopt the manifest: without the lock first; if a listed file is gone (another
        process merged it away meanwhile) or the manifest is missing, again under the lock,
        where the listing is stable and a missing manifest means a new index."""
        try:
            changed = self._reload(locked=False)
            if changed is not None:
                return changed
        except IndexCorruptError:
            pass
        with self._locked(refresh=False):
            return bool(self._reload(locked=True))

    def _reload(self, locked: bool) -> bool | None:
        """Read the manifest and adopt it; None (unlocked) when there is none right now."""
        try:
            manifest, stamp = read_manifest(self.directory, self.fingerprint, self.separator)
        except FileNotFoundError:
            if not locked:
                return None  # another process may be recreating the index
            fresh = Manifest(secrets.token_hex(8), [], set(), 0, _next_free_segment(self.directory))
            changed = self._adopt(fresh)
            self._seen = None  # not on disk yet
            self._write_manifest()
            return changed
        changed = self._adopt(manifest)
        self._stamp = stamp
        return changed

    def refresh(self) -> bool:
        """Adopt what other processes wrote: map new segments, drop merged-away ones, apply
        their removals. True when something changed. Cheap when nothing did (one stat)."""
        try:
            stamp = _stamp(os.stat(self.directory / MANIFEST))
        except OSError:
            return False  # being recreated; the next call sees the new one
        if stamp == self._stamp:
            return False
        return self._load()

    def _adopt(self, m: Manifest) -> bool:
        seen = (m.uid, tuple(m.segments), frozenset(m.removed), m.next_serial, m.next_segment)
        if seen == self._seen:
            return False
        recreated = bool(self._uid) and bool(m.uid) and m.uid != self._uid
        have = {} if recreated else {s.name: s for s in self.segments}
        fresh: list[Segment] = []
        segments: list[Segment] = []
        try:
            for name in m.segments:
                seg = have.get(name)
                if seg is None:
                    seg = read_segment(self.directory / name, self.fingerprint, self.separator)
                    fresh.append(seg)
                segments.append(seg)
        except BaseException:  # a Ctrl-C too: released, then re-raised
            for seg in fresh:
                self._release(seg)
            raise
        kept = {id(s) for s in segments}
        gone = [s for s in self.segments if id(s) not in kept]
        tail = {d.serial for d in self._tail_docs}
        tail_removed = self.removed & tail
        on_disk = {d.serial for s in segments for d in s.docs}
        # Serials are never reused within one index, so removals only accumulate; ours not yet
        # written count too. After a recreate our old serials mean nothing.
        ours = set() if recreated else self.removed - tail
        removed = (m.removed | ours) & on_disk
        next_serial = max(self.next_serial, m.next_serial)
        if self._tail_docs and min(tail) < m.next_serial:
            # Another process handed out our tail's serials meanwhile: take fresh ones.
            renumber = {d.serial: m.next_serial + i for i, d in enumerate(self._tail_docs)}
            for d in self._tail_docs:
                d.serial = renumber[d.serial]
            tail_removed = {renumber[s] for s in tail_removed}
            next_serial = max(next_serial, m.next_serial + len(self._tail_docs))
        self.segments = segments
        self.removed = removed | tail_removed
        self.next_serial = next_serial
        self.next_segment = max(self.next_segment, m.next_segment)
        self._uid = m.uid or self._uid
        self._seen = seen
        self._rebuild_live()
        for seg in gone:
            self._release(seg)  # a cursor still reading it keeps the map until it goes
        return True

    def _rebuild_live(self) -> None:
        live: dict[str, set[int]] = {}
        for docs in [*(s.docs for s in self.segments), self._tail_docs]:
            for d in docs:
                if d.serial not in self.removed:
                    live.setdefault(d.doc_id, set()).add(d.serial)
        self._live = live
        self._mark_all_dead()

    def _mark_all_dead(self) -> None:
        for seg in self.segments:
            self._mark_dead(seg.docs, seg.dead)
        self._mark_dead(self._tail_docs, self._tail_dead)

    def _mark_dead(self, docs: list[DocSpan], dead: DeadSpans) -> None:
        spans = sorted((d.start, d.end) for d in docs if d.serial in self.removed)
        if spans or dead.size():
            dead.set([a for a, _ in spans], [b for _, b in spans])

    @contextlib.contextmanager
    def _locked(self, *, refresh: bool = True, wait: bool = True) -> Iterator[None]:
        """Hold the index's file lock (re-entrant); on first entry adopt what others wrote.
        `wait=False` raises filelock.Timeout when another process holds it."""
        if self._lock_depth and self._lock_owner == threading.get_ident():
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        path = self.directory / LOCK_FILE
        with FileLock(path, timeout=-1 if wait else 0):
            self._lock_depth, self._lock_owner = 1, threading.get_ident()
            try:
                if refresh:
                    self._reload(locked=True)
                yield
            finally:
                self._lock_depth = 0
                # Keep the directory to index files. Unlinking before unlocking is safe: a
                # waiter that then locks the unlinked file sees st_nlink == 0 and retries
                # (filelock >= 3.20.4), and our writes are all done.
                with contextlib.suppress(OSError):
                    path.unlink()

    def _remove_orphans(self) -> None:
        """Files left by an interrupted flush or compaction (not in the manifest). Only under
        the lock, where no other process is half-way through a write; skipped while busy."""
        try:
            with self._locked(wait=False):
                live = {s.name for s in self.segments}
                for p in self.directory.iterdir():
                    if (p.name.endswith(".sam") and p.name not in live) or p.name.endswith(".tmp"):
                        p.unlink(missing_ok=True)
        except Timeout:
            pass

    def _write_manifest(
        self, segments: list[Segment] | None = None, removed: set[int] | None = None
    ) -> None:
        """Write the manifest (under the lock, after a refresh): only the listed segments'
        removed serials go to disk, tail serials mean nothing to other processes."""
        segments = self.segments if segments is None else segments
        removed = self.removed if removed is None else removed
        if not self._uid:
            self._uid = secrets.token_hex(8)
        names = tuple(s.name for s in segments)
        on_disk = sorted(removed & {d.serial for s in segments for d in s.docs})
        seen = (self._uid, names, frozenset(on_disk), self.next_serial, self.next_segment)
        if seen == self._seen:
            return
        data = {
            "format": MANIFEST_FORMAT,
            "fingerprint": self.fingerprint,
            "separator": self.separator,
            "uid": self._uid,
            "segments": list(names),
            "removed": on_disk,
            "next_serial": self.next_serial,
            "next_segment": self.next_segment,
        }
        path = self.directory / MANIFEST
        try:
            _atomic_write(path, json.dumps(data, indent=1).encode())
        except OSError as exc:
            raise SamchatError(f"cannot write {path} ({exc.strerror})") from exc
        self._seen = seen
        try:
            self._stamp = _stamp(os.stat(path))
        except OSError:
            self._stamp = None

    @staticmethod
    def _release(seg: Segment) -> None:
        # seg.sam stays: a cursor another thread is building may still take it (it is freed
        # with the last reference); only the map is closed, when no cursor reads it any more.
        seg.views = None
        if seg.mapping is not None:
            # A cursor may still read it; then the map closes with the cursor.
            with contextlib.suppress(BufferError):
                seg.mapping.close()
            seg.mapping = None

    def _discard(self, seg: Segment) -> None:
        # Other processes may still map it: that stays valid on POSIX after the unlink.
        with contextlib.suppress(OSError):
            (self.directory / seg.name).unlink(missing_ok=True)
        self._release(seg)

    def _publish(self, segments: list[Segment], removed: set[int], gone: list[Segment]) -> None:
        """Make a new segment list current: manifest first, then the replaced files go."""
        self._write_manifest(segments, removed)
        self.segments = segments
        self.removed = removed
        for seg in gone:
            self._discard(seg)

    def close(self) -> None:
        for seg in self.segments:
            self._release(seg)
        self.segments = []
        _OPEN.discard(self)

    def has_document(self, doc_id: str) -> bool:
        return doc_id in self._live

    def document_ids(self) -> set[str]:
        return set(self._live)
