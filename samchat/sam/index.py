"""The static index: suffix automata over many documents, kept on disk and memory-mapped.

A directory holds `manifest.json` (format, tokenizer fingerprint, separator, segment files,
tombstones) and segment files. Documents are joined as `doc sep doc sep ...`. New documents go
to an in-memory tail; `flush()` freezes the tail into a new segment and merges segments when
there are too many. Removing a document tombstones it at once (cursors stop drafting from it)
and compaction drops its tokens.

Several processes may open one directory (the TUI, `samchat ask`, `samchat import`). Every write
holds the file lock `index.lock` and first adopts what the others wrote (`refresh()`); the
manifest is replaced atomically and segment files are immutable, so readers need no lock.

Segment files hold one frozen automaton each, in the format of segments.py; opening maps them
and checks sizes and checksums, and `warm()` later copies the arrays into the process for faster
queries.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout
from librt.vecs import vec
from mypy_extensions import i16, i32

from samchat.errors import IndexCorruptError, SamchatError
from samchat.sam import impl
from samchat.sam.segments import (
    MAX_SEGMENT_TOKENS,
    DocSpan,
    Segment,
    copy_i16,
    copy_i32,
    read_segment,
    write_segment,
)

if TYPE_CHECKING:
    from samchat.sam.automaton import (
        Automaton,
        DeadSpans,
        MatchCursor,
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
_OPEN: weakref.WeakSet[StaticIndex] = weakref.WeakSet()


def open_indexes() -> list[Path]:
    """The directories of the indexes that are open (not closed, still referenced)."""
    return [index.directory for index in list(_OPEN)]


def close_all(keep: set[Path] | None = None) -> None:
    """Close every open index (but those in the directories `keep`)."""
    for index in list(_OPEN):
        if not keep or index.directory not in keep:
            index.close()


class StaticIndex:
    """A growable, versioned, memory-mapped set of suffix automata over documents."""

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

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, fingerprint: str, separator: int) -> StaticIndex:
        """Open the index in `directory`, creating it if missing.

        Raises IndexCorruptError for a corrupt or truncated file, or an index built with another
        tokenizer; the caller rebuilds it (see `recreate`).
        """
        directory = Path(directory)
        if not (directory / MANIFEST).exists():
            try:
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                msg = f"cannot create the static index directory {directory} ({exc.strerror})"
                raise SamchatError(msg) from exc
        index = cls(directory, fingerprint, separator, [], set(), 0, 0)
        index._load()
        index._remove_orphans()
        return index

    @classmethod
    def recreate(cls, directory: Path, fingerprint: str, separator: int) -> StaticIndex:
        """Delete this index's files in `directory` (nothing else) and start an empty index."""
        directory = Path(directory)
        if not directory.exists():
            return cls.open(directory, fingerprint, separator)
        index = cls(directory, fingerprint, separator, [], set(), 0, 0)
        with index._locked(refresh=False):
            index.next_segment = _next_free_segment(directory)
            for p in directory.iterdir():
                if p.name == MANIFEST or p.name.endswith((".sam", ".sam.tmp", ".json.tmp")):
                    p.unlink(missing_ok=True)
            index._uid = secrets.token_hex(8)
            index._write_manifest()
        return index

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

    # -- documents --------------------------------------------------------------------------

    def has_document(self, doc_id: str) -> bool:
        return doc_id in self._live

    def document_ids(self) -> set[str]:
        return set(self._live)

    def add_document(self, doc_id: str, tokens: Sequence[int]) -> None:
        """Add a document to the in-memory tail (persisted by flush()); replaces a live one."""
        toks = [int(t) for t in tokens]
        if self.separator in toks:
            raise SamchatError(f"document {doc_id!r} contains the separator token; cannot index it")
        if any(t < 0 or t > 0x7FFFFFFF for t in toks):
            raise SamchatError(f"document {doc_id!r} has a token id out of range")
        if self._tail.n_tokens + len(toks) + 1 > MAX_SEGMENT_TOKENS:
            raise SamchatError(
                f"document {doc_id!r} does not fit in one index segment; flush() first"
            )
        if self.has_document(doc_id):
            self.remove_document(doc_id)
        self._append_tail(doc_id, self.next_serial, toks)
        self.next_serial += 1

    def _append_tail(self, doc_id: str, serial: int, toks: list[int]) -> None:
        start = self._tail.n_tokens
        # In chunks: compiled code holds the GIL, and a long document in one call would freeze
        # every other thread of the process (the UI, a streaming reply) until it is in.
        for i in range(0, len(toks), _EXTEND_CHUNK):
            self._tail.extend_many(toks[i : i + _EXTEND_CHUNK])
        self._tail.extend(self.separator)
        self._tail_docs.append(DocSpan(doc_id, serial, start, start + len(toks)))
        self._live.setdefault(doc_id, set()).add(serial)

    def remove_document(self, doc_id: str) -> None:
        """Stop drafting from a document at once; its tokens go at the next compaction."""
        serials = self._live.get(doc_id)
        if not serials:
            return
        if serials <= {d.serial for d in self._tail_docs}:
            # Only in memory: nothing on disk to tombstone.
            del self._live[doc_id]
            self.removed |= serials
            self._mark_dead(self._tail_docs, self._tail_dead)
            return
        with self._locked():  # the refresh may renumber tail serials: look them up again
            serials = self._live.pop(doc_id, set())
            if not serials:
                return
            self.removed |= serials  # in force even if the write fails; the next one keeps it
            self._mark_all_dead()
            self._write_manifest()

    def _mark_dead(self, docs: list[DocSpan], dead: DeadSpans) -> None:
        spans = sorted((d.start, d.end) for d in docs if d.serial in self.removed)
        if spans or dead.size():
            dead.set([a for a, _ in spans], [b for _, b in spans])

    # -- persistence ------------------------------------------------------------------------

    def _segment_path(self) -> Path:
        name = f"seg-{self.next_segment:06d}.sam"
        self.next_segment += 1
        return self.directory / name

    def _build(
        self, pieces: list[tuple[str, int, list[int]]]
    ) -> tuple[SuffixAutomaton, list[DocSpan]]:
        total = sum(len(t) + 1 for _, _, t in pieces)
        sam = impl.SuffixAutomaton(total)
        docs: list[DocSpan] = []
        for doc_id, serial, toks in pieces:
            start = sam.n_tokens
            for t in toks:
                sam.extend(t)
            sam.extend(self.separator)
            docs.append(DocSpan(doc_id, serial, start, start + len(toks)))
        sam.freeze()
        return sam, docs

    def _doc_tokens(self, sam: Automaton, span: DocSpan) -> list[int]:
        return sam._span(span.start, span.end - span.start)

    def _write_new_segment(self, sam: SuffixAutomaton, docs: list[DocSpan]) -> Segment:
        path = self._segment_path()
        try:
            write_segment(path, sam, docs, self.fingerprint, self.separator)
        except OSError as exc:
            path.with_name(path.name + ".tmp").unlink(missing_ok=True)
            raise SamchatError(f"cannot write {path} ({exc.strerror})") from exc
        return read_segment(path, self.fingerprint, self.separator)

    def _drop_replaced(self) -> None:
        """A tail document that another process also flushed meanwhile: the last flush wins,
        as add_document's replacing does in one process."""
        tail = {d.serial for d in self._tail_docs}
        stale: set[int] = set()
        for d in self._tail_docs:
            if d.serial not in self.removed:
                older = self._live.get(d.doc_id, set()) - tail
                if older:
                    stale |= older
                    self._live[d.doc_id] -= older
        if stale:
            self.removed |= stale
            self._mark_all_dead()

    def flush(self) -> None:
        """Write the tail as a new segment; merge segments when there are too many."""
        with self._locked():
            self._drop_replaced()
            tail = {d.serial for d in self._tail_docs}
            live_tail = [d for d in self._tail_docs if d.serial not in self.removed]
            pieces = [(d.doc_id, d.serial, self._doc_tokens(self._tail, d)) for d in live_tail]
            written: list[Segment] = []
            try:
                segments = list(self.segments)
                if live_tail:
                    if len(live_tail) == len(self._tail_docs):
                        sam = self._tail
                        sam.freeze()
                        docs = live_tail
                    else:
                        sam, docs = self._build(pieces)
                    written.append(self._write_new_segment(sam, docs))
                    segments.append(written[-1])
                removed = self.removed - tail
                gone: list[Segment] = []
                if len(segments) > MAX_SEGMENTS:
                    by_size = sorted(range(len(segments)), key=lambda i: segments[i].sam.n_tokens)
                    which = sorted(by_size[: MAX_SEGMENTS // 2 + 1])
                    segments, removed, gone, merged = self._merged(segments, removed, which)
                    written += [merged] if merged is not None else []
                self._publish(segments, removed, gone)
            except BaseException:  # a Ctrl-C too: released, then re-raised
                for seg in written:
                    self._discard(seg)
                if self._tail.is_frozen:
                    # Nothing was lost: the documents go back to a growing tail for the next try.
                    self._tail, self._tail_docs = impl.SuffixAutomaton(), []
                    self._tail_dead = impl.DeadSpans()
                    self.removed -= tail
                    for doc_id, serial, toks in pieces:
                        self._append_tail(doc_id, serial, toks)
                raise
            self._tail = impl.SuffixAutomaton()
            self._tail_docs = []
            self._tail_dead = impl.DeadSpans()

    def compact(self) -> None:
        """Flush, then merge every segment into one, dropping removed documents."""
        with self._locked():
            self.flush()
            if len(self.segments) > 1 or self.removed:
                self._merge(list(range(len(self.segments))))

    def _merge(self, which: list[int]) -> None:
        segments, removed, gone, merged = self._merged(self.segments, self.removed, which)
        try:
            self._publish(segments, removed, gone)
        except BaseException:  # a Ctrl-C too: released, then re-raised
            if merged is not None:
                self._discard(merged)
            raise

    def _merged(
        self, segments: list[Segment], removed: set[int], which: list[int]
    ) -> tuple[list[Segment], set[int], list[Segment], Segment | None]:
        """Write the live documents of segments[which] as one segment: (the new segment list,
        removed serials left, the replaced segments, the new segment or None if all were
        removed). Nothing is published: see _publish."""
        chosen = [segments[i] for i in which]
        if sum(seg.sam.n_tokens for seg in chosen) > MAX_SEGMENT_TOKENS:
            raise SamchatError("the static index is too large to merge into one segment")
        pieces = [
            (d.doc_id, d.serial, self._doc_tokens(seg.sam, d))
            for seg in chosen
            for d in seg.docs
            if d.serial not in removed
        ]
        dropped = {d.serial for seg in chosen for d in seg.docs}
        keep = [s for i, s in enumerate(segments) if i not in set(which)]
        merged = None
        if pieces:
            sam, docs = self._build(pieces)
            merged = self._write_new_segment(sam, docs)
            # The merged segment takes the place of the first merged one (order = age).
            keep.insert(min(which), merged)
        return keep, removed - dropped, chosen, merged

    def _publish(self, segments: list[Segment], removed: set[int], gone: list[Segment]) -> None:
        """Make a new segment list current: manifest first, then the replaced files go."""
        self._write_manifest(segments, removed)
        self.segments = segments
        self.removed = removed
        for seg in gone:
            self._discard(seg)

    def _discard(self, seg: Segment) -> None:
        # Other processes may still map it: that stays valid on POSIX after the unlink.
        with contextlib.suppress(OSError):
            (self.directory / seg.name).unlink(missing_ok=True)
        self._release(seg)

    def warm(self) -> None:
        """Copy the memory-mapped segments into native arrays: queries get ~3x faster, and the
        index then takes its size in process memory. Safe in a background thread (copies go in
        chunks, so other threads keep running): cursors made afterwards use the copies, older
        ones keep reading the map."""
        for seg in list(self.segments):
            views = seg.views
            if views is None:
                continue
            wide: dict[str, vec[i32]] = {}
            narrow: dict[str, vec[i16]] = {}
            for name, view in zip(impl.ARRAY_NAMES, views, strict=True):
                if view.format == "H":
                    narrow[name] = copy_i16(view.cast("B").cast("h"))
                else:
                    wide[name] = copy_i32(view)
            seg.sam = impl.frozen_from(wide, narrow)
            seg.views = None
            if seg.mapping is not None:
                with contextlib.suppress(BufferError):  # older cursors still read it
                    seg.mapping.close()
                seg.mapping = None

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

    def close(self) -> None:
        for seg in self.segments:
            self._release(seg)
        self.segments = []
        _OPEN.discard(self)

    # -- queries ----------------------------------------------------------------------------

    def cursor(self, *, tail: bool = True) -> MultiCursor:
        """A cursor over every segment and (unless tail=False) the unflushed tail. Removals
        reach it at once; documents added or merged after it was made do not: make a new one
        after flush()/compact()/refresh().

        tail=False gives a cursor another thread may use while this one writes: segments are
        immutable once written (merges, refreshes and warm() swap in new objects), while the
        tail grows and is frozen in place by flush()."""
        cursors: list[MatchCursor] = [
            impl.MatchCursor(seg.sam, self.separator, seg.dead) for seg in list(self.segments)
        ]
        if tail and self._tail_docs:
            cursors.append(impl.MatchCursor(self._tail, self.separator, self._tail_dead))
        multi: MultiCursor = impl.MultiCursor(cursors)
        return multi

    def stats(self) -> dict[str, int | float]:
        tokens = sum(s.sam.n_tokens for s in self.segments)
        states = sum(s.sam.n_states for s in self.segments)
        disk = sum(s.nbytes for s in self.segments)
        return {
            "tokens": tokens,
            "states": states,
            "segments": len(self.segments),
            "documents": len(self._live),
            "removed": len(self.removed),
            "tail_tokens": self._tail.n_tokens,
            "bytes": disk,
            "bytes_per_token": disk / tokens if tokens else 0.0,
        }
