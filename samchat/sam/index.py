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
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from librt.vecs import vec
from mypy_extensions import i16, i32

from samchat.errors import SamchatError
from samchat.sam import impl
from samchat.sam.segments import (
    copy_i16,
    copy_i32,
)

if TYPE_CHECKING:
    from samchat.sam.automaton import (
        MatchCursor,
        MultiCursor,
    )
from samchat.sam.index_files import LOCK_FILE as LOCK_FILE
from samchat.sam.index_files import MANIFEST as MANIFEST
from samchat.sam.index_files import MAX_SEGMENTS as MAX_SEGMENTS
from samchat.sam.index_files import _next_free_segment
from samchat.sam.index_files import close_all as close_all
from samchat.sam.index_files import open_indexes as open_indexes
from samchat.sam.index_writes import IndexWrites


class StaticIndex(IndexWrites):
    """A growable, versioned, memory-mapped set of suffix automata over documents: opened here,
    its segments kept in step by IndexFiles (index_files.py), written by IndexWrites
    (index_writes.py), queried by cursor() and stats()."""

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
