"""The llama.cpp engine: a GGUF model through llama-cpp-python's low-level API.

Tree verification runs in one llama_decode. llama.cpp masks attention by sequence: a token
sees the cells that share its (first) sequence id, at positions up to its own. So each leaf of
the draft tree gets a sequence id, each node carries the ids of the leaves below it, and the
committed cells are copied into every leaf's sequence first: a node then sees the cache and
exactly its ancestors. After verification the accepted path's sequence is kept and the rest
dropped (llama.cpp's own `speculative` example does the same). Positions are per cell, so the
accepted path needs no compaction: its cells already hold positions start, start + 1, ...
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from samchat.engines.base import DRAFT_ROWS, EngineModel, Logits, ReadStopped
from samchat.engines.costs.curve import CostCurve
from samchat.engines.costs.measurement import measure_engine
from samchat.engines.llamacpp.model import (
    has_pending,
    llama,
    loaded_weights,
    raise_pending,
    system_info,
    threads,
    version,
)
from samchat.errors import SamchatError

if TYPE_CHECKING:
    from samchat.engines.layout import TreeLayout

MAX_SEQ = DRAFT_ROWS  # leaves of one draft tree (trees hold fewer nodes)
# The cache's type, under flash attention. With Q8_0 every query takes the one-row path, so a
# row does not depend on its batch. An F16 cache reads a long prompt twice as fast, tiling 64+
# queries (docs/benchmarks.md), and its rows equal one-token decoding's bit for bit if no
# forward that decoding is compared with has F16_TILE rows or more and none has one row:
# a lone query on 2+ threads splits the cache between them and sums in another order, so a
# one-token forward gets a throwaway second row there, in a sequence of its own. That step
# costs more than Q8_0's, so only a conversation that opens with a long read takes F16.
Q8_0, F16 = 8, 1  # GGML types
LONG_READ = 256  # tokens read into an empty cache from which it is F16
F16_TILE = 64  # queries from which llama.cpp's flash attention tiles an F16 cache
MAX_ROWS = F16_TILE - 1
PAD_SEQ = 1  # the throwaway row's sequence (a tree's leaves use it only during a tree forward)
MAX_BATCH = 2048  # tokens per llama_decode (a prefill chunk)
# A session's prefill pieces, small to keep a long prompt cancellable; the same pieces whatever
# came before them (see _flush), so plain and speculative decoding read a prompt alike.
PREFILL_PIECE = 256
# The cost curve is measured after 256 cached tokens and again after each of these (where the
# model's context allows): verification after a long context costs relatively more, and most
# of the rise comes in the first thousand tokens (docs/benchmarks.md), so a point in between
# keeps the replies of everyday chats from being priced on the cheap 256-token curve.
LONG_CONTEXTS = (768, 2048)


def _strlen() -> int:
    """The address of the C library's strlen."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") if os.name == "nt" else None)
    address = ctypes.cast(libc.strlen, ctypes.c_void_p).value
    assert address is not None
    return address


class LlamaCppEngine:
    name = "llamacpp"
    prefill_chunk = PREFILL_PIECE
    exact_rows = MAX_ROWS

    def __init__(
        self,
        lm: EngineModel,
        n_ctx: int | None = None,
        cache_dir: Path | None = None,
        kv: int = Q8_0,
    ) -> None:
        self.lm = lm
        self.cache_dir = cache_dir  # where measured costs are kept (None: this process only)
        self.weights = loaded_weights(lm.model)
        self.device_type = "cpu"
        self.plain_reason: str | None = self.weights.plain_reason
        self.tree_reason: str | None = None
        self.inexact_reason: str | None = None  # rows equal one-token decoding (see Q8_0, F16)
        lib = llama()
        self._lib = lib
        # stop_reading()'s flag, and the C function llama.cpp asks between graph nodes whether
        # to abort: libc's strlen of the flag (1 once set). A Python callback would take the
        # GIL hundreds of times a decode, and a Ctrl-C raised in it would be lost.
        self._stop = (ctypes.c_ubyte * 2)()
        self._abort = lib.ggml_abort_callback(_strlen())
        self._no_abort = lib.ggml_abort_callback(0)  # NULL: a step is never aborted
        self.n_vocab = int(self.weights.n_vocab)
        self._n_ctx = int(n_ctx or lm.context_limit)
        self._split = threads() > 1  # a lone query's attention would be split (see F16)
        self._ctx = None
        self._open(kv)
        self._batch = lib.llama_batch_init(MAX_BATCH, 0, MAX_SEQ)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(MAX_BATCH,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(MAX_BATCH,))
        self._nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(MAX_BATCH,))
        self._out = np.ctypeslib.as_array(b.logits, shape=(MAX_BATCH,))
        self._seq = [np.ctypeslib.as_array(b.seq_id[i], shape=(MAX_SEQ,)) for i in range(MAX_BATCH)]
        for row in self._seq:
            row[0] = 0
        self._tree_rows = 0  # batch rows whose sequence ids a tree changed
        # Accepted tokens whose cells were dropped (see commit): the next decode computes them
        # first. The session counts them as cached.
        self._backlog: list[int] = []
        self._tree: _TreeBatch | None = None  # the last tree forward, until commit or crop

    def _open(self, kv: int) -> None:
        """A new, empty context whose cache has type kv."""
        lib = self._lib
        params = lib.llama_context_default_params()
        params.n_ctx = self._n_ctx
        params.n_batch = MAX_BATCH
        params.n_ubatch = 512
        params.n_seq_max = MAX_SEQ
        params.kv_unified = True  # all sequences share one cache: a tree's leaves share cells
        params.n_threads = params.n_threads_batch = threads()
        params.no_perf = True
        params.type_k = params.type_v = kv
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        ctx = lib.llama_init_from_model(self.weights.handle, params)
        if ctx and has_pending():
            lib.llama_free(ctx)
            raise_pending()
        if not ctx:
            raise SamchatError(
                f"llama.cpp could not create a context of {params.n_ctx} tokens for "
                f"{self.weights.path.name} (out of memory?); close other programs or pick a "
                "smaller model"
            )
        if self._ctx:
            lib.llama_free(self._ctx)
        self._ctx = ctx
        self._mem = lib.llama_get_memory(ctx)
        self.kv = kv

    # -- cache --------------------------------------------------------------------------------

    def plan_read(self, cached: int, new: int) -> None:
        """Before a prompt's `new` tokens are read after `cached` kept ones: a conversation
        that opens with a long read takes an F16 cache, any other Q8_0 (see Q8_0, F16). A
        switch empties the cache, so it is made only while it holds less than one piece."""
        want = F16 if new >= LONG_READ else Q8_0
        if want == self.kv or cached >= PREFILL_PIECE:
            return
        try:
            self._open(want)
        except SamchatError:
            if want == F16:  # twice Q8_0's memory: where it does not fit, read at Q8_0's pace
                return
            raise
        self._backlog = []
        self._tree = None

    @property
    def _cells(self) -> int:
        """Positions 0..n-1 of sequence 0: the conversation's cells."""
        return int(self._lib.llama_memory_seq_pos_max(self._mem, 0)) + 1

    @property
    def length(self) -> int:
        return self._cells + len(self._backlog)

    def reset(self) -> None:
        self._lib.llama_memory_clear(self._mem, True)
        self._backlog = []
        self._tree = None

    def crop(self, length: int) -> None:
        lib = self._lib
        if not lib.llama_memory_seq_rm(self._mem, -1, length, -1):
            self.reset()  # this memory cannot drop a suffix: start over (the session re-prefills)
            return
        # Leaf sequences a tree forward (committed or not, decoded or failed) may have left.
        lib.llama_memory_seq_keep(self._mem, 0)
        self._tree = None
        # A failed decode never consumes the backlog (it is cleared only after success).
        self._backlog = self._backlog[: max(0, length - self._cells)]

    # -- forwards -----------------------------------------------------------------------------

    def _decode(self, n: int) -> None:
        pad = n == 1 and self._split and self.kv == F16
        if pad:  # the throwaway second row (see F16)
            self._tok[1], self._pos[1], self._nseq[1], self._out[1] = (
                self._tok[0],
                self._pos[0],
                1,
                0,
            )
            self._seq[1][0] = PAD_SEQ
            self._tree_rows = max(self._tree_rows, 2)  # its sequence id is reset before reuse
        self._batch.n_tokens = n + pad
        rc = self._lib.llama_decode(self._ctx, self._batch)
        if pad:
            self._lib.llama_memory_seq_rm(self._mem, PAD_SEQ, -1, -1)
        raise_pending()
        if rc != 0:
            if rc == 2 and self._stop[0]:  # the session crops what the piece left
                raise ReadStopped("the read was stopped")
            if rc == 1:
                raise SamchatError(
                    "llama.cpp found no room in its KV cache; start a new chat or shorten it"
                )
            raise SamchatError(
                f"llama.cpp failed to decode a batch (code {rc}); try again, or use --engine torch"
            )

    def _fill(self, ids: list[int], start: int, outputs: int) -> None:
        """Rows for ids at positions start, start + 1, ... in sequence 0; the last `outputs`
        rows give logits."""
        n = len(ids)
        self._reset_tree_rows()
        self._tok[:n] = ids
        self._pos[:n] = np.arange(start, start + n, dtype=np.int32)
        self._nseq[:n] = 1
        self._out[:n] = 0
        if outputs:
            self._out[n - outputs : n] = 1

    def _reset_tree_rows(self) -> None:
        for row in self._seq[: self._tree_rows]:
            row[0] = 0
        self._tree_rows = 0

    def _flush(self, n: int) -> None:
        """Decode the backlog alone where it and the next n rows would exceed MAX_ROWS: its
        rows must come out as one-token decoding's would (and a prefill's pieces stay the
        same whatever backlog decoding left)."""
        back = self._backlog
        if back and len(back) + n > MAX_ROWS and self.kv == F16:
            self._fill(back, self._cells, outputs=0)
            self._decode(len(back))
            self._backlog = []

    def stop_reading(self) -> None:
        self._stop[0] = 1  # llama.cpp reads it between graph nodes (see __init__)

    def prefill(self, ids: list[int], logits: int = 0) -> Logits | None:
        self._flush(len(ids))
        todo = self._backlog + ids
        nb = len(self._backlog)
        start = self._cells
        out: Logits | None = None
        # Only a read may stop midway: a step's rows must never be cut short.
        self._stop[0] = 0
        self._lib.llama_set_abort_callback(self._ctx, self._abort, ctypes.addressof(self._stop))
        try:
            for i in range(0, len(todo), MAX_BATCH):
                chunk = todo[i : i + MAX_BATCH]
                last = i + len(chunk) == len(todo)
                # Output flags select logits rows only; the cache is computed alike.
                rows = min(logits, len(ids), len(chunk)) if last else 0
                self._fill(chunk, start + i, outputs=rows)
                self._decode(len(chunk))
                self._backlog = todo[i + len(chunk) : nb]
                if rows:
                    out = self._logits(rows)
        finally:
            self._lib.llama_set_abort_callback(self._ctx, self._no_abort, None)
        return out

    def _logits(self, n: int, order: list[int] | None = None) -> Logits:
        """The n output rows (copied: llama.cpp reuses its buffer), reordered by `order`."""
        ptr = self._lib.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab))
        out: Logits = rows.copy() if order is None else rows[order]
        return out

    def forward(self, ids: list[int], layout: TreeLayout | None = None) -> Logits:
        n = len(ids)
        self._flush(n)
        back = self._backlog
        if n + len(back) > MAX_BATCH:
            raise SamchatError(f"a forward takes at most {MAX_BATCH} tokens, got {n + len(back)}")
        start = self._cells
        if layout is None:
            self._fill(back + ids, start, outputs=n)
            self._decode(len(back) + n)
            self._backlog = []
            return self._logits(n)
        tree = _TreeBatch(ids, layout)
        self._fill_tree(tree, back, start)
        self._decode(len(back) + n)
        self._backlog = []
        self._tree = tree
        return self._logits(n, tree.row_of)

    def _fill_tree(self, tree: _TreeBatch, back: list[int], start: int) -> None:
        """Backlog rows first (context for every leaf), then the tree in depth-first order."""
        leaves = tree.n_leaves
        if leaves > MAX_SEQ:
            raise SamchatError(f"a draft tree may have at most {MAX_SEQ} leaves")
        lib, mem = self._lib, self._mem
        for s in range(1, leaves):
            lib.llama_memory_seq_cp(mem, 0, s, -1, -1)
        self._reset_tree_rows()
        nb = len(back)
        n = nb + len(tree.order)
        every = list(range(leaves))
        self._tok[:nb] = back
        self._tok[nb:n] = [tree.ids[j] for j in tree.order]
        self._pos[:nb] = np.arange(start, start + nb, dtype=np.int32)
        self._pos[nb:n] = [start + nb + tree.depths[j] for j in tree.order]
        self._out[:nb] = 0
        self._out[nb:n] = 1
        nseq, seq = self._nseq, self._seq
        for r in range(n):
            seqs = every if r < nb else tree.below[tree.order[r - nb]]
            nseq[r] = len(seqs)
            seq[r][: len(seqs)] = seqs
        self._tree_rows = n

    def commit(self, start: int, keep: list[int]) -> None:
        lib, mem = self._lib, self._mem
        tree = self._tree
        self._tree = None
        if tree is None:  # plain or sequence input: the kept rows are the first ones
            if keep != list(range(len(keep))):
                raise ValueError("a sequence forward keeps a prefix of its inputs")
            if not lib.llama_memory_seq_rm(mem, 0, start + len(keep), -1):
                raise SamchatError("llama.cpp could not drop rejected draft rows from its cache")
            return
        # Cells are attended in storage order, so a later token must never land in a cell
        # before an older one: keep only the accepted rows that lead the batch (no dropped row
        # before them) and recompute the rest of the path with the next decode.
        rows = tree.row_of
        lead = 0
        while lead < len(keep) and rows[keep[lead]] == lead:
            lead += 1
        s = tree.below[keep[lead - 1]][0]  # a leaf below the last kept node
        lib.llama_memory_seq_keep(mem, s)  # drops every cell off that leaf's path
        lib.llama_memory_seq_rm(mem, s, start + lead, -1)
        if s != 0:
            lib.llama_memory_seq_cp(mem, s, 0, -1, -1)
            lib.llama_memory_seq_rm(mem, s, -1, -1)
        self._backlog = [tree.ids[k] for k in keep[lead:]]

    @property
    def meter(self) -> LlamaCppMeter:
        return LlamaCppMeter(self.lm, self.cache_dir, self.kv)

    def close(self) -> None:
        if self._ctx:
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the library may be gone
            self.close()


class LlamaCppMeter:
    """The llama.cpp engine's measuring: its cost curve, measured on an engine of its own once
    per build, CPU, thread count and file (then kept in lm.curves and the cost cache)."""

    def __init__(self, lm: EngineModel, cache_dir: Path | None, kv: int = Q8_0) -> None:
        self.lm = lm
        self.cache_dir = cache_dir
        self.kv = kv  # the engine's cache type now, for describe()

    def fit(self, measure: bool = True) -> None:
        """llama.cpp picks its own kernels (at build time, and by repacking at load)."""

    def _curve_file(self, digest: str) -> Path | None:
        return self.cache_dir / "costs" / f"{digest}.json" if self.cache_dir is not None else None

    def cached_cost_curve(self) -> CostCurve | None:
        digest = curve_digest(self.lm)
        return self.lm.curves.known(digest, self._curve_file(digest))

    def cost_curve(self, cancelled: Callable[[], bool] | None = None) -> CostCurve:
        lm = self.lm
        longs = _long_contexts(lm)
        digest = curve_digest(lm)

        def measure() -> CostCurve:
            probe = LlamaCppEngine(lm, n_ctx=max(512, max(longs) + 2 * MAX_SEQ))
            try:
                return measure_engine(
                    probe, probe.n_vocab, long_contexts=longs, cancelled=cancelled
                )
            finally:
                probe.close()

        return lm.curves.get(digest, self._curve_file(digest), measure)

    def describe(self) -> str:
        weights = loaded_weights(self.lm.model)
        return (
            f"llama.cpp (llama-cpp-python {version()}), {weights.file_type}, "
            f"{'F16' if self.kv == F16 else 'Q8_0'} cache, {threads()} threads; {system_info()}"
        )


def _long_contexts(lm: EngineModel) -> tuple[int, ...]:
    room = int(lm.context_limit) - 2 * MAX_SEQ
    return tuple(sorted({min(c, room) for c in LONG_CONTEXTS}))


def curve_digest(lm: EngineModel) -> str:
    """What a curve measured for a loaded GGUF holds for: this build, CPU, thread count, file
    and context; its cached copy is `costs/<digest>.json` in the cache directory."""
    from samchat.engines.cpu import cpu_name

    weights = loaded_weights(lm.model)
    path = weights.path
    longs = _long_contexts(lm)
    ident = f"llamacpp|{version()}|{cpu_name()}|{threads()}|{path.resolve()}|{longs}"
    ident += f"|{path.stat().st_size}|{weights.file_type}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


class _TreeBatch:
    """[pending] + a draft tree laid out for one llama_decode: inputs in depth-first order
    (first children first, so the drafters' likeliest path leads the batch), and for each
    input the leaves below it (its sequence ids; leaf 0 is the first-child path's)."""

    __slots__ = ("below", "depths", "ids", "n_leaves", "order", "row_of")

    def __init__(self, ids: list[int], layout: TreeLayout) -> None:
        n = len(ids)
        parents = layout.parents
        children: list[list[int]] = [[] for _ in range(n)]
        for j in range(1, n):
            children[parents[j]].append(j)
        order: list[int] = []
        stack = [0]
        while stack:
            j = stack.pop()
            order.append(j)
            stack.extend(reversed(children[j]))
        row_of = [0] * n
        for r, j in enumerate(order):
            row_of[j] = r
        below: list[list[int]] = [[] for _ in range(n)]
        leaves = 0
        for j in order:  # leaves numbered in batch order
            if not children[j]:
                below[j].append(leaves)
                leaves += 1
        for j in reversed(order):  # children after parents: sweep up
            if j:
                below[parents[j]].extend(below[j])
        for b in below:
            b.sort()
        self.ids = ids
        self.depths = layout.depths
        self.order = order
        self.row_of = row_of
        self.below = below
        self.n_leaves = leaves
