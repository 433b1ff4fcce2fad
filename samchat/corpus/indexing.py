"""Keeping the static SAM index in step with the store.

SQLite is the source of truth; the index under index/<tokenizer fingerprint>/ next to the database
is derived from it. `sync()` adds whatever the store has and the index lacks (documents
`doc:<id>`, user and assistant messages `msg:<id>`) and drops what the store no longer has, so a
crash at any point, a deleted chat or a new tokenizer all end in the same consistent state after
the next sync.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from samchat.errors import IndexCorruptError, SamchatError
from samchat.store import Store
from samchat.tokenizer import Tokenizer

if TYPE_CHECKING:
    from samchat.sam import MultiCursor
    from samchat.sam.index import StaticIndex

Encode = Callable[[str], list[int]]
# (done, total, what): what is a short human description of the current step
IndexProgress = Callable[[int, int, str], None]
FLUSH_EVERY_TOKENS = 500_000


def index_root(store: Store) -> Path:
    """The static indexes of `store` live next to its database file."""
    root = store.path.parent / "index"
    root.mkdir(mode=0o700, exist_ok=True)  # it holds the tokens of private chats
    return root


def tokenizer_codec(tokenizer: Tokenizer) -> tuple[Encode, int]:
    """How the index tokenizes text with a Hugging Face tokenizer, and its separator token."""

    separator = tokenizer.eos_token_id
    if separator is None:
        separator = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    separator = int(separator)

    def encode(text: str) -> list[int]:
        ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
        # A literal "<|im_end|>" in a document must not split it in the index.
        return [int(i) for i in ids if i != separator]

    return encode, separator


def _key_order(key: str) -> tuple[int, int]:
    kind, _, num = key.partition(":")
    return (0 if kind == "doc" else 1, int(num) if num.isdigit() else 0)


@dataclass
class SyncResult:
    added: int = 0
    removed: int = 0
    tokens: int = 0
    seconds: float = 0.0
    rebuilt: bool = False


def _open_static(directory: Path, fingerprint: str, separator: int) -> StaticIndex:
    from samchat.sam.index import StaticIndex

    return StaticIndex.open(directory, fingerprint, separator)


def _recreate_static(directory: Path, fingerprint: str, separator: int) -> StaticIndex:
    from samchat.sam.index import StaticIndex

    return StaticIndex.recreate(directory, fingerprint, separator)


class IndexManager:
    """The static index of one tokenizer, fed from one Store (use it from one thread)."""

    def __init__(
        self,
        store: Store,
        fingerprint: str,
        encode: Encode,
        separator: int,
        *,
        model: str | None = None,
        root: Path | None = None,
    ) -> None:
        self.store = store
        self.fingerprint = fingerprint
        self.encode = encode
        self.separator = separator
        self.model = model
        self.directory = (root or index_root(store)) / fingerprint
        self._index: StaticIndex | None = None
        self.lock = threading.RLock()  # held while the index changes; readers may take it too

    @property
    def index(self) -> StaticIndex:
        if self._index is None:
            raise SamchatError("the static index is not open yet")
        return self._index

    def open(self, progress: IndexProgress | None = None) -> SyncResult:
        """Open the index (rebuilding it if corrupt or missing) and bring it up to date."""
        rebuilt = False
        with self.lock:
            try:
                self._index = _open_static(self.directory, self.fingerprint, self.separator)
            except IndexCorruptError:
                # Derived data: the store still has every text, so a rebuild loses nothing.
                self._index = _recreate_static(self.directory, self.fingerprint, self.separator)
                rebuilt = True
            self.store.register_index(self.fingerprint, self.separator, self.model)
        result = self.sync(progress)
        result.rebuilt = rebuilt
        return result

    def rebuild(self, progress: IndexProgress | None = None) -> SyncResult:
        """Throw the index away and build it again from the store."""
        with self.lock:
            self.close()
            self._index = _recreate_static(self.directory, self.fingerprint, self.separator)
            self.store.register_index(self.fingerprint, self.separator, self.model)
        result = self.sync(progress)
        result.rebuilt = True
        return result

    def close(self) -> None:
        """Release the index's memory maps (unflushed additions are re-added by the next sync)."""
        with self.lock:
            if self._index is not None:
                self._index.close()
                self._index = None

    def sync(self, progress: IndexProgress | None = None) -> SyncResult:
        """Add what the store has and the index lacks; drop what the store no longer has."""
        start = time.perf_counter()
        result = SyncResult()
        index = self.index
        with self.lock:
            # Before reading the store: what other processes indexed is in it by then.
            index.refresh()
        want = self.store.index_keys()
        with self.lock:
            have = index.document_ids()
            for key in have - want:
                index.remove_document(key)
                result.removed += 1
        missing = sorted(want - have, key=_key_order)
        pending = 0
        for done, key in enumerate(missing):
            if progress is not None:
                progress(done, len(missing), key)
            text = self.store.text_for_key(key)
            if text is None:  # deleted while we were working
                continue
            tokens = [t for t in self.encode(text) if t != self.separator]
            with self.lock:
                index.add_document(key, tokens)
            if key.startswith("doc:"):
                with contextlib.suppress(SamchatError):
                    self.store.set_token_count(int(key[4:]), len(tokens))
            result.added += 1
            result.tokens += len(tokens)
            pending += len(tokens)
            if pending >= FLUSH_EVERY_TOKENS:
                with self.lock:
                    index.flush()
                pending = 0
        if missing and progress is not None:
            progress(len(missing), len(missing), "done")
        if result.added or result.removed:
            with self.lock:
                index.flush()
        result.seconds = time.perf_counter() - start
        return result

    def add(self, key: str, tokens: list[int]) -> None:
        """Append one item right away (e.g. a just-imported document whose tokens are known)."""
        with self.lock:
            if not self.index.has_document(key):
                self.index.add_document(key, [t for t in tokens if t != self.separator])

    def flush(self) -> None:
        with self.lock:
            self.index.flush()

    def compact(self) -> None:
        """Merge all segments into one and drop the tokens of deleted items."""
        with self.lock:
            self.index.compact()

    def status(self) -> dict[str, Any]:
        want = self.store.index_keys()
        have = self.index.document_ids()
        stats: dict[str, Any] = dict(self.index.stats())
        stats.update(
            fingerprint=self.fingerprint,
            directory=str(self.directory),
            missing=len(want - have),
            stale=len(have - want),
        )
        return stats


def drop_from_indexes(store: Store, keys: set[str], root: Path | None = None) -> int:
    """Remove `keys` from every static index built so far (any tokenizer), without loading a
    tokenizer. Returns how many removals happened. A corrupt index is left for its next open,
    which rebuilds it from the store anyway."""
    removed = 0
    for fingerprint, separator, _model in store.indexes():
        directory = (root or index_root(store)) / fingerprint
        if not directory.exists():
            continue
        try:
            index = _open_static(directory, fingerprint, separator)
        except IndexCorruptError:
            continue
        try:
            hit = keys & index.document_ids()
            for key in hit:
                index.remove_document(key)  # persisted at once (the manifest's removed set)
            removed += len(hit)
        finally:
            index.close()
    return removed


class FlushedView:
    """What a reply drafts from while the indexer may be writing: cursors over the index's
    flushed segments. A segment never changes once written (a merge, a refresh or warm() swap in
    new objects; old cursors keep the old ones), so cursors need no lock. Documents still in
    the in-memory tail, mid-sync, join at the sync's flush."""

    def __init__(self, index: StaticIndex) -> None:
        self.index = index

    def cursor(self) -> MultiCursor:
        return self.index.cursor(tail=False)


class BackgroundIndexer:
    """Runs an IndexManager in a daemon thread with its own store connection. `poke()` after a
    reply, an import or a delete; the thread syncs. Replies draft from `drafting_view()`, which
    needs no lock: a reply never waits for a sync."""

    def __init__(
        self,
        db_path: Path,
        fingerprint: str,
        encode: Encode,
        separator: int,
        *,
        model: str | None = None,
        root: Path | None = None,
        on_progress: IndexProgress | None = None,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self._args = (db_path, fingerprint, encode, separator, model, root)
        self.on_progress = on_progress
        self.on_error = on_error
        self.ready = threading.Event()  # set once the index is open and synced
        self.idle = threading.Event()  # set whenever no sync is running or queued
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.lock = threading.RLock()
        self.manager: IndexManager | None = None
        self.last_result: SyncResult | None = None
        self._thread = threading.Thread(target=self._run, name="samchat-indexer", daemon=True)

    @property
    def index(self) -> StaticIndex | None:
        return self.manager.index if self.manager is not None and self.ready.is_set() else None

    def drafting_view(self) -> FlushedView | None:
        """The index for drafting from another thread; None until it is open and synced, and
        again once the indexer has stopped (replies then draft without it)."""
        manager = self.manager
        if manager is None or not self.ready.is_set() or manager._index is None:
            return None
        return FlushedView(manager._index)

    def start(self) -> BackgroundIndexer:
        self._thread.start()
        return self

    def poke(self) -> None:
        self.idle.clear()
        self._wake.set()

    def stop(self, timeout: float | None = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self.idle.wait(timeout)

    def _run(self) -> None:
        db_path, fingerprint, encode, separator, model, root = self._args
        try:
            store = Store.open(db_path)
        except Exception as exc:
            self._fail(exc)
            return
        try:
            manager = IndexManager(store, fingerprint, encode, separator, model=model, root=root)
            manager.lock = self.lock
            self.manager = manager
            self.last_result = manager.open(self.on_progress)
            self.ready.set()
            # Copy the mapped segments into native arrays: later cursors query ~3x faster.
            manager.index.warm()
            while not self._stop.is_set():
                if not self._wake.is_set():
                    self.idle.set()
                self._wake.wait()
                self._wake.clear()
                if self._stop.is_set():
                    break
                self.last_result = result = manager.sync(self.on_progress)
                if result.added or result.removed:
                    manager.index.warm()  # new segments (ours, merged or another process's)
        except Exception as exc:
            self._fail(exc)
        finally:
            self.ready.clear()  # the index closes below: nobody may start drafting from it
            if self.manager is not None:
                self.manager.close()
            store.close()
            self.idle.set()

    def _fail(self, exc: Exception) -> None:
        self.idle.set()
        if self.on_error is not None:
            self.on_error(exc)
