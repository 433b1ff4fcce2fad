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
import hashlib
import threading
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from samchat.decoding.budget import CostCurve, load_or_measure, measure_engine
from samchat.engines.llamacpp_model import llama, system_info, threads, version
from samchat.errors import SamchatError

if TYPE_CHECKING:
    from samchat.decoding.tree import TreeLayout

MAX_SEQ = 64  # leaves of one draft tree (trees hold at most 64 nodes)
KV_TYPE = 8  # GGML_TYPE_Q8_0
MAX_BATCH = 2048  # tokens per llama_decode (a prefill chunk)
_MEASURE_CTX = 512
_CURVES: dict[str, CostCurve] = {}
_CURVES_LOCK = threading.Lock()


class LlamaCppEngine:
    name = "llamacpp"

    def __init__(self, lm: Any, n_ctx: int | None = None) -> None:
        self.lm = lm
        self.weights = lm.model
        self.device = torch.device("cpu")
        self.plain_reason: str | None = None
        self.tree_reason: str | None = None
        lib = llama()
        self._lib = lib
        self.n_vocab = int(self.weights.n_vocab)
        params = lib.llama_context_default_params()
        params.n_ctx = int(n_ctx or lm.context_limit)
        params.n_batch = MAX_BATCH
        params.n_ubatch = 512
        params.n_seq_max = MAX_SEQ
        params.kv_unified = True  # all sequences share one cache: a tree's leaves share cells
        params.n_threads = params.n_threads_batch = threads()
        params.no_perf = True
        # A Q8_0 cache keeps every attention on flash attention's one-row path, whose result
        # for a token does not depend on the batch it is in. With an F16 or F32 cache, llama.cpp
        # splits one-token attention over the cache across threads (from 512 cells) and tiles
        # batches of 64+ queries: verification and plain decoding then round differently
        # (logits apart by up to 0.9, measured) and greedy outputs diverged.
        params.type_k = params.type_v = KV_TYPE
        params.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_ENABLED
        ctx = lib.llama_init_from_model(self.weights.handle, params)
        if not ctx:
            raise SamchatError(
                f"llama.cpp could not create a context of {params.n_ctx} tokens for "
                f"{self.weights.path.name} (out of memory?)"
            )
        self._ctx = ctx
        self._mem = lib.llama_get_memory(ctx)
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
        self._leaf_of: list[int] | None = None  # the last tree forward: a leaf sequence per input

    # -- cache --------------------------------------------------------------------------------

    @property
    def length(self) -> int:
        """Positions 0..n-1 of sequence 0: what the cache holds for the conversation."""
        return int(self._lib.llama_memory_seq_pos_max(self._mem, 0)) + 1

    def reset(self) -> None:
        self._lib.llama_memory_clear(self._mem, True)
        self._leaf_of = None

    def crop(self, length: int) -> None:
        lib = self._lib
        lib.llama_memory_seq_rm(self._mem, -1, length, -1)
        if self._leaf_of is not None:  # a tree forward that was never committed
            lib.llama_memory_seq_keep(self._mem, 0)
            self._leaf_of = None

    # -- forwards -----------------------------------------------------------------------------

    def _decode(self, n: int) -> None:
        self._batch.n_tokens = n
        rc = self._lib.llama_decode(self._ctx, self._batch)
        if rc != 0:
            if rc == 1:
                raise SamchatError(
                    "llama.cpp found no room in its KV cache; start a new chat or shorten it"
                )
            raise SamchatError(f"llama.cpp failed to decode a batch (code {rc})")

    def _fill(self, ids: list[int], start: int, outputs: bool) -> None:
        n = len(ids)
        self._reset_tree_rows()
        self._tok[:n] = ids
        self._pos[:n] = np.arange(start, start + n, dtype=np.int32)
        self._nseq[:n] = 1
        self._out[:n] = 1 if outputs else 0

    def _reset_tree_rows(self) -> None:
        for row in self._seq[: self._tree_rows]:
            row[0] = 0
        self._tree_rows = 0

    def prefill(self, ids: list[int]) -> None:
        start = self.length
        for i in range(0, len(ids), MAX_BATCH):
            chunk = ids[i : i + MAX_BATCH]
            self._fill(chunk, start + i, outputs=False)
            self._decode(len(chunk))

    def _logits(self, n: int) -> torch.Tensor:
        ptr = self._lib.llama_get_logits(self._ctx)
        rows = np.ctypeslib.as_array(ptr, shape=(n, self.n_vocab))
        return torch.from_numpy(rows.copy())

    def forward(self, ids: list[int], layout: TreeLayout | None = None) -> torch.Tensor:
        n = len(ids)
        if n > MAX_BATCH:
            raise SamchatError(f"a forward takes at most {MAX_BATCH} tokens, got {n}")
        start = self.length
        if layout is None:
            self._fill(ids, start, outputs=True)
            self._decode(n)
            return self._logits(n)
        self._tree(ids, layout, start)
        self._decode(n)
        return self._logits(n)

    def _tree(self, ids: list[int], layout: TreeLayout, start: int) -> None:
        """Fill the batch for [pending] + tree: sequence ids by leaf, positions by depth."""
        n = len(ids)
        parents = layout.parents
        has_child = [False] * n
        for p in parents[1:]:
            has_child[p] = True
        leaves = [j for j in range(n) if not has_child[j]]
        if len(leaves) > MAX_SEQ:
            raise SamchatError(f"a draft tree may have at most {MAX_SEQ} leaves")
        below: list[list[int]] = [[] for _ in range(n)]
        for s, j in enumerate(leaves):
            below[j].append(s)
        for j in range(n - 1, 0, -1):  # children come after parents: sweep up
            below[parents[j]].extend(below[j])
        lib, mem = self._lib, self._mem
        for s in range(1, len(leaves)):
            lib.llama_memory_seq_cp(mem, 0, s, -1, -1)
        self._reset_tree_rows()
        self._tok[:n] = ids
        self._pos[:n] = np.asarray(layout.depths, dtype=np.int32) + start
        self._out[:n] = 1
        nseq = self._nseq
        seq = self._seq
        for j in range(n):
            seqs = below[j]
            nseq[j] = len(seqs)
            seq[j][: len(seqs)] = seqs
        self._tree_rows = n
        self._leaf_of = [seqs[0] for seqs in below]

    def commit(self, start: int, keep: list[int]) -> None:
        lib, mem = self._lib, self._mem
        end = start + len(keep)
        leaf_of = self._leaf_of
        self._leaf_of = None
        if leaf_of is None:  # plain or sequence input: the kept rows are the first ones
            if keep != list(range(len(keep))):
                raise ValueError("a sequence forward keeps a prefix of its inputs")
            lib.llama_memory_seq_rm(mem, 0, end, -1)
            return
        s = leaf_of[keep[-1]]  # a leaf below the last accepted node: its path holds them all
        lib.llama_memory_seq_keep(mem, s)  # drops every cell off that path, and other ids
        lib.llama_memory_seq_rm(mem, s, end, -1)  # the path below the last accepted node
        if s != 0:
            lib.llama_memory_seq_cp(mem, s, 0, -1, -1)
            lib.llama_memory_seq_rm(mem, s, -1, -1)

    # -- cost and description ------------------------------------------------------------------

    def cost_curve(self) -> CostCurve:
        from samchat.engines.cpu import cpu_name
        from samchat.paths import cache_dir

        path = self.weights.path
        ident = f"llamacpp|{version()}|{cpu_name()}|{threads()}|{path.resolve()}"
        ident += f"|{path.stat().st_size}|{self.weights.file_type}"
        digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
        with _CURVES_LOCK:
            curve = _CURVES.get(digest)
            if curve is None:
                lm = self.lm

                def measure() -> CostCurve:
                    probe = LlamaCppEngine(lm, n_ctx=_MEASURE_CTX)
                    try:
                        return measure_engine(probe, self.n_vocab)
                    finally:
                        probe.close()

                curve = load_or_measure(measure, cache_dir() / "costs" / f"{digest}.json")
                _CURVES[digest] = curve
        return curve

    def describe(self) -> str:
        return (
            f"llama.cpp (llama-cpp-python {version()}), {self.weights.file_type}, "
            f"{threads()} threads; {system_info()}"
        )

    def close(self) -> None:
        if self._ctx:
            self._lib.llama_batch_free(self._batch)
            self._lib.llama_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the library may be gone
            self.close()
