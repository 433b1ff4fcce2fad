"""Writing a static index (see samchat/sam/index.py): documents added to the in-memory tail or
tombstoned, the tail frozen into a segment (flush), segments merged (compact)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.errors import SamchatError
from samchat.sam import impl
from samchat.sam.segments import (
    MAX_SEGMENT_TOKENS,
    DocSpan,
    Segment,
    read_segment,
    write_segment,
)

if TYPE_CHECKING:
    from samchat.sam.automaton import (
        Automaton,
        SuffixAutomaton,
    )
from samchat.sam.index_files import (
    _EXTEND_CHUNK,
    MAX_SEGMENTS,
    IndexFiles,
)


class IndexWrites(IndexFiles):
    """Adding, removing, flushing and compacting, each under the directory's lock."""

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
