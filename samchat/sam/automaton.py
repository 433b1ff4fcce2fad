"""Suffix automata over token ids, on packed i32 arrays.

mypyc compiles this module at install time (see setup.py); the very same source runs interpreted
as the pure-Python fallback (samchat.sam loads it by path), so both behave identically.

Layout. States are numbered from 0 (the root). Per state: `link` (suffix link), `slen` (length of
its longest string), `minend` (end position, exclusive, of the first occurrence) and, once counted,
`cnt` (number of occurrences). While growing, the first edge of a state lives inline
(`fe_tok`/`fe_dst`: most states have exactly one) and the others in an open-addressing table
keyed by (state, token) plus a per-state list, so clones can copy them. Freezing replaces the
edges by a CSR table sorted by token (`off`, `etok`, `edst`), which is also the on-disk layout
read back by MappedAutomaton through memoryviews over a memory map.
"""

import heapq
from typing import Final

from librt.vecs import append, vec
from mypy_extensions import i32, i64

ROOT: Final = 0
_MAX_TOKEN: Final = 0x7FFFFFFF
_EMPTY: Final = -1
# Multipliers for the edge hash; both < 2**31 so that no product overflows an i64.
_HA: Final = 0x5BD1E995
_HB: Final = 0x27D4EB2F


class Automaton:
    """What a MatchCursor needs from an automaton (growing, frozen or memory-mapped)."""

    def _ntok(self) -> i64:
        raise NotImplementedError

    def _nstates(self) -> i64:
        raise NotImplementedError

    def _tok(self, pos: i64) -> i64:
        raise NotImplementedError

    def _len(self, s: i64) -> i64:
        raise NotImplementedError

    def _link(self, s: i64) -> i64:
        raise NotImplementedError

    def _minend(self, s: i64) -> i64:
        raise NotImplementedError

    def _cnt(self, s: i64) -> i64:
        raise NotImplementedError

    def _next(self, s: i64, c: i64) -> i64:
        """Target of the edge (s, c), or -1."""
        raise NotImplementedError

    def _children(self, s: i64, toks: list[int], dsts: list[int]) -> None:
        """Append the edges of s (any order) to toks/dsts."""
        raise NotImplementedError

    def _prepare_counts(self) -> None:
        """Make _cnt valid (a growing automaton counts lazily)."""

    @property
    def n_tokens(self) -> int:
        return self._ntok()

    @property
    def n_states(self) -> int:
        return self._nstates()

    def token_at(self, pos: int) -> int:
        if pos < 0 or pos >= self._ntok():
            raise IndexError("token position out of range")
        return self._tok(pos)

    def count(self, s: int) -> int:
        """Occurrences of the strings of state s in the text."""
        self._prepare_counts()
        return self._cnt(s)


class SuffixAutomaton(Automaton):
    """Online suffix automaton; `freeze()` counts occurrences and compacts the edges."""

    text: vec[i32]
    link: vec[i32]
    slen: vec[i32]
    minend: vec[i32]
    cnt: vec[i32]
    fe_tok: vec[i32]
    fe_dst: vec[i32]
    xe_head: vec[i32]
    x_tok: vec[i32]
    x_dst: vec[i32]
    x_next: vec[i32]
    hkeys: vec[i64]
    hvals: vec[i32]
    hmask: i64
    hused: i64
    last: i64
    frozen: bool
    counted_at: i64
    off: vec[i32]
    etok: vec[i32]
    edst: vec[i32]

    def __init__(self, capacity: int = 0) -> None:
        cap: i64 = capacity if capacity > 0 else 16
        self.text = vec[i32](capacity=cap)
        scap: i64 = 2 * cap
        self.link = vec[i32](capacity=scap)
        self.slen = vec[i32](capacity=scap)
        self.minend = vec[i32](capacity=scap)
        self.cnt = vec[i32]()
        self.fe_tok = vec[i32](capacity=scap)
        self.fe_dst = vec[i32](capacity=scap)
        self.xe_head = vec[i32](capacity=scap)
        self.x_tok = vec[i32]()
        self.x_dst = vec[i32]()
        self.x_next = vec[i32]()
        hsize: i64 = 64
        while hsize < cap:
            hsize *= 2
        self.hkeys = vec[i64]([_EMPTY] * hsize)
        self.hvals = vec[i32]([0] * hsize)
        self.hmask = hsize - 1
        self.hused = 0
        self.last = ROOT
        self.frozen = False
        self.counted_at = -1
        self.off = vec[i32]()
        self.etok = vec[i32]()
        self.edst = vec[i32]()
        self._new_state(0, 0)
        self.link[0] = -1

    # -- building ---------------------------------------------------------------------------

    def _new_state(self, length: i64, end: i64) -> i64:
        s: i64 = len(self.slen)
        self.link = append(self.link, -1)
        self.slen = append(self.slen, i32(length))
        self.minend = append(self.minend, i32(end))
        self.fe_tok = append(self.fe_tok, -1)
        self.fe_dst = append(self.fe_dst, -1)
        self.xe_head = append(self.xe_head, -1)
        return s

    def _hslot(self, s: i64, c: i64) -> i64:
        """Slot of key (s, c) in the edge table: where it is, or the empty slot to put it."""
        key: i64 = (s << 32) | c
        h: i64 = ((s * _HA + c * _HB) >> 13) & self.hmask
        keys = self.hkeys
        while True:
            k = keys[h]
            if k == key or k == _EMPTY:  # noqa: SIM109 - no tuple in the hot loop
                return h
            h = (h + 1) & self.hmask

    def _grow_table(self) -> None:
        old_keys = self.hkeys
        old_vals = self.hvals
        size: i64 = 2 * len(old_keys)
        self.hkeys = vec[i64]([_EMPTY] * size)
        self.hvals = vec[i32]([0] * size)
        self.hmask = size - 1
        for i in range(len(old_keys)):
            k = old_keys[i]
            if k != _EMPTY:
                h = self._hslot(k >> 32, k & 0xFFFFFFFF)
                self.hkeys[h] = k
                self.hvals[h] = old_vals[i]

    def _get(self, s: i64, c: i64) -> i64:
        if self.fe_tok[s] == c:
            return i64(self.fe_dst[s])
        if self.xe_head[s] < 0:
            return -1
        h = self._hslot(s, c)
        if self.hkeys[h] == _EMPTY:
            return -1
        return i64(self.x_dst[i64(self.hvals[h])])

    def _add(self, s: i64, c: i64, d: i64) -> None:
        """Add the edge (s, c) -> d; it must not exist yet."""
        if self.fe_tok[s] < 0:
            self.fe_tok[s] = i32(c)
            self.fe_dst[s] = i32(d)
            return
        if 2 * (self.hused + 1) > len(self.hkeys):
            self._grow_table()
        e: i64 = len(self.x_tok)
        self.x_tok = append(self.x_tok, i32(c))
        self.x_dst = append(self.x_dst, i32(d))
        self.x_next = append(self.x_next, self.xe_head[s])
        self.xe_head[s] = i32(e)
        h = self._hslot(s, c)
        self.hkeys[h] = (s << 32) | c
        self.hvals[h] = i32(e)
        self.hused += 1

    def _redirect(self, s: i64, c: i64, d: i64) -> None:
        if self.fe_tok[s] == c:
            self.fe_dst[s] = i32(d)
        else:
            self.x_dst[i64(self.hvals[self._hslot(s, c)])] = i32(d)

    def extend(self, token: int) -> None:
        """Append one token (amortised O(1))."""
        if self.frozen:
            raise ValueError("cannot extend a frozen suffix automaton")
        if token < 0 or token > _MAX_TOKEN:
            raise ValueError(f"token id {token} is out of range")
        c: i64 = token
        self.text = append(self.text, i32(c))
        n: i64 = len(self.text)
        cur = self._new_state(n, n)
        p: i64 = self.last
        while p != -1 and self._get(p, c) < 0:
            self._add(p, c, cur)
            p = i64(self.link[p])
        if p == -1:
            self.link[cur] = ROOT
        else:
            q: i64 = self._get(p, c)
            if self.slen[p] + 1 == self.slen[q]:
                self.link[cur] = i32(q)
            else:
                clone = self._new_state(i64(self.slen[p]) + 1, i64(self.minend[q]))
                self.link[clone] = self.link[q]
                self.fe_tok[clone] = self.fe_tok[q]
                self.fe_dst[clone] = self.fe_dst[q]
                e: i64 = i64(self.xe_head[q])
                while e >= 0:
                    self._add(clone, i64(self.x_tok[e]), i64(self.x_dst[e]))
                    e = i64(self.x_next[e])
                while p != -1 and self._get(p, c) == q:
                    self._redirect(p, c, clone)
                    p = i64(self.link[p])
                self.link[q] = i32(clone)
                self.link[cur] = i32(clone)
        self.last = cur

    def extend_many(self, tokens: list[int]) -> None:
        for t in tokens:
            self.extend(t)

    def _compute_counts(self) -> None:
        """cnt_endpos for every state: one pass over the link tree in decreasing length."""
        ns: i64 = len(self.slen)
        n: i64 = len(self.text)
        # Counting sort of the states by length.
        buckets = vec[i32]([0] * (n + 2))
        for s in range(ns):
            ln = self.slen[s]
            buckets[i64(ln)] = buckets[i64(ln)] + 1
        acc: i64 = 0
        for ln2 in range(n + 1):
            b: i64 = i64(buckets[ln2])
            buckets[ln2] = i32(acc)
            acc += b
        order = vec[i32]([0] * ns)
        for s in range(ns):
            ln = self.slen[s]
            order[i64(buckets[i64(ln)])] = i32(s)
            buckets[i64(ln)] = buckets[i64(ln)] + 1
        # A state whose longest string ends where it first ends was created by extend (not a clone)
        # and owns one end position of its own.
        cnt = vec[i32]([0] * ns)
        for s in range(1, ns):
            # Originals (made by extend at step i) have length == minend == i; a clone copies
            # minend from a longer state, so its length is below it. Only originals own an end.
            if self.slen[s] == self.minend[s]:
                cnt[s] = 1
        i: i64 = ns - 1
        while i > 0:
            s2: i64 = i64(order[i])
            up: i64 = i64(self.link[s2])
            cnt[up] = cnt[up] + cnt[s2]
            i -= 1
        self.cnt = cnt
        self.counted_at = n

    def _prepare_counts(self) -> None:
        if self.counted_at != len(self.text):
            self._compute_counts()

    def freeze(self) -> None:
        """Count occurrences and replace the growing edge table by the compact sorted one."""
        if self.frozen:
            return
        self._compute_counts()
        ns: i64 = len(self.slen)
        off = vec[i32](capacity=ns + 1)
        etok = vec[i32](capacity=len(self.x_tok) + ns)
        edst = vec[i32](capacity=len(self.x_tok) + ns)
        toks: list[int] = []
        dsts: list[int] = []
        for s in range(ns):
            off = append(off, i32(len(etok)))
            toks.clear()
            dsts.clear()
            self._children(s, toks, dsts)
            k: i64 = len(toks)
            if k == 1:
                etok = append(etok, i32(toks[0]))
                edst = append(edst, i32(dsts[0]))
            elif k > 1:
                pairs = sorted(zip(toks, dsts, strict=True))
                for t, d in pairs:
                    etok = append(etok, i32(t))
                    edst = append(edst, i32(d))
        off = append(off, i32(len(etok)))
        self.off = off
        self.etok = etok
        self.edst = edst
        empty32 = vec[i32]()
        self.fe_tok = empty32
        self.fe_dst = empty32
        self.xe_head = empty32
        self.x_tok = empty32
        self.x_dst = empty32
        self.x_next = empty32
        self.hkeys = vec[i64]()
        self.hvals = empty32
        self.hmask = 0
        self.frozen = True

    # -- queries ----------------------------------------------------------------------------

    def _ntok(self) -> i64:
        return len(self.text)

    def _nstates(self) -> i64:
        return len(self.slen)

    def _tok(self, pos: i64) -> i64:
        return i64(self.text[pos])

    def _len(self, s: i64) -> i64:
        return i64(self.slen[s])

    def _link(self, s: i64) -> i64:
        return i64(self.link[s])

    def _minend(self, s: i64) -> i64:
        return i64(self.minend[s])

    def _cnt(self, s: i64) -> i64:
        return i64(self.cnt[s])

    def _next(self, s: i64, c: i64) -> i64:
        if not self.frozen:
            return self._get(s, c)
        lo: i64 = i64(self.off[s])
        hi: i64 = i64(self.off[s + 1])
        while lo < hi:
            mid = (lo + hi) >> 1
            t: i64 = i64(self.etok[mid])
            if t < c:
                lo = mid + 1
            elif t > c:
                hi = mid
            else:
                return i64(self.edst[mid])
        return -1

    def _children(self, s: i64, toks: list[int], dsts: list[int]) -> None:
        if self.frozen:
            for i in range(i64(self.off[s]), i64(self.off[s + 1])):
                toks.append(i64(self.etok[i]))
                dsts.append(i64(self.edst[i]))
            return
        if self.fe_tok[s] < 0:
            return
        toks.append(self.fe_tok[s])
        dsts.append(self.fe_dst[s])
        e: i64 = i64(self.xe_head[s])
        while e >= 0:
            toks.append(self.x_tok[e])
            dsts.append(self.x_dst[e])
            e = i64(self.x_next[e])

    @property
    def is_frozen(self) -> bool:
        return self.frozen

    def arrays(self) -> list[tuple[str, vec[i32]]]:
        """The frozen layout, in file order: (name, array)."""
        if not self.frozen:
            raise ValueError("freeze() the automaton before saving it")
        return [
            ("text", self.text),
            ("link", self.link),
            ("slen", self.slen),
            ("minend", self.minend),
            ("cnt", self.cnt),
            ("off", self.off),
            ("etok", self.etok),
            ("edst", self.edst),
        ]

    def nbytes(self) -> int:
        """Bytes held by the arrays (capacity slack excluded)."""
        total: i64 = 4 * (
            len(self.text)
            + len(self.link)
            + len(self.slen)
            + len(self.minend)
            + len(self.cnt)
            + len(self.fe_tok)
            + len(self.fe_dst)
            + len(self.xe_head)
            + len(self.x_tok)
            + len(self.x_dst)
            + len(self.x_next)
            + len(self.hvals)
            + len(self.off)
            + len(self.etok)
            + len(self.edst)
        )
        return total + 8 * len(self.hkeys)


def build(tokens: list[int], freeze: bool = True) -> SuffixAutomaton:
    """A suffix automaton over `tokens` (frozen by default)."""
    sam = SuffixAutomaton(len(tokens))
    for t in tokens:
        sam.extend(t)
    if freeze:
        sam.freeze()
    return sam


ARRAY_NAMES: Final = ("text", "link", "slen", "minend", "cnt", "off", "etok", "edst")


class MappedAutomaton(Automaton):
    """A frozen automaton read in place from int32 memoryviews (a memory-mapped segment)."""

    text: memoryview
    link: memoryview
    slen: memoryview
    minend: memoryview
    cnt: memoryview
    off: memoryview
    etok: memoryview
    edst: memoryview
    ntok: i64
    nst: i64

    def __init__(self, views: list[memoryview]) -> None:
        if len(views) != len(ARRAY_NAMES):
            raise ValueError("wrong number of arrays")
        self.text = views[0]
        self.link = views[1]
        self.slen = views[2]
        self.minend = views[3]
        self.cnt = views[4]
        self.off = views[5]
        self.etok = views[6]
        self.edst = views[7]
        self.ntok = len(self.text)
        self.nst = len(self.slen)

    def _ntok(self) -> i64:
        return self.ntok

    def _nstates(self) -> i64:
        return self.nst

    def _tok(self, pos: i64) -> i64:
        v: int = self.text[pos]
        return v

    def _len(self, s: i64) -> i64:
        v: int = self.slen[s]
        return v

    def _link(self, s: i64) -> i64:
        v: int = self.link[s]
        return v

    def _minend(self, s: i64) -> i64:
        v: int = self.minend[s]
        return v

    def _cnt(self, s: i64) -> i64:
        v: int = self.cnt[s]
        return v

    def _next(self, s: i64, c: i64) -> i64:
        lo: i64 = self.off[s]
        hi: i64 = self.off[s + 1]
        etok = self.etok
        while lo < hi:
            mid = (lo + hi) >> 1
            t: i64 = etok[mid]
            if t < c:
                lo = mid + 1
            elif t > c:
                hi = mid
            else:
                d: int = self.edst[mid]
                return d
        return -1

    def _children(self, s: i64, toks: list[int], dsts: list[int]) -> None:
        lo: int = self.off[s]
        hi: int = self.off[s + 1]
        toks.extend(self.etok[lo:hi].tolist())
        dsts.extend(self.edst[lo:hi].tolist())


class DeadSpans:
    """Sorted, disjoint token spans [start, end) of removed documents, shared by cursors."""

    starts: vec[i32]
    ends: vec[i32]
    version: i64

    def __init__(self) -> None:
        self.starts = vec[i32]()
        self.ends = vec[i32]()
        self.version = 0

    def set(self, starts: list[int], ends: list[int]) -> None:
        if len(starts) != len(ends):
            raise ValueError("starts and ends differ in length")
        self.starts = vec[i32]([i32(x) for x in starts])
        self.ends = vec[i32]([i32(x) for x in ends])
        self.version += 1

    def size(self) -> int:
        return len(self.starts)

    def covers(self, end: i64) -> bool:
        """Whether the occurrence ending (exclusive) at `end` lies in a removed document."""
        n: i64 = len(self.starts)
        if n == 0 or end <= 0:
            return False
        pos: i64 = end - 1
        lo: i64 = 0
        hi: i64 = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if i64(self.starts[mid]) <= pos:
                lo = mid + 1
            else:
                hi = mid
        return lo > 0 and pos < i64(self.ends[lo - 1])


class MatchCursor:
    """The longest suffix of the fed tokens that occurs in the automaton's text.

    `dead` marks removed documents: a match or draft whose first occurrence ends inside one is
    cut back to a shorter match that does not. Drafts never contain `stop_token`.
    """

    sam: Automaton
    state: i64
    mlen: i64
    stop: i64
    dead: DeadSpans
    seen_version: i64
    eff_state: i64
    eff_len: i64
    eff_valid: bool

    def __init__(self, sam: Automaton, stop_token: int = -1, dead: DeadSpans | None = None) -> None:
        self.sam = sam
        self.stop = stop_token
        self.dead = dead if dead is not None else DeadSpans()
        self.seen_version = -1
        self.state = ROOT
        self.mlen = 0
        self.eff_state = ROOT
        self.eff_len = 0
        self.eff_valid = False

    def set_dead_spans(self, starts: list[int], ends: list[int]) -> None:
        """Token spans [start, end) of removed documents, sorted and disjoint."""
        self.dead.set(starts, ends)

    def reset(self) -> None:
        self.state = ROOT
        self.mlen = 0
        self.eff_state = ROOT
        self.eff_len = 0
        self.eff_valid = True

    def copy(self) -> "MatchCursor":
        other = MatchCursor(self.sam, self.stop, self.dead)
        other.state = self.state
        other.mlen = self.mlen
        other.eff_valid = False
        return other

    def feed(self, token: int) -> None:
        """Consume one token: amortised O(1)."""
        if token < 0 or token > _MAX_TOKEN:
            self.reset()
            return
        sam = self.sam
        c: i64 = token
        s: i64 = self.state
        ln: i64 = self.mlen
        # A growing automaton may have split our state since the last feed (a clone took the
        # shorter strings); climb to the state that really holds the current match.
        while s != ROOT and sam._len(sam._link(s)) >= ln:
            s = sam._link(s)
        while True:
            t = sam._next(s, c)
            if t >= 0:
                s = t
                ln += 1
                break
            if s == ROOT:
                ln = 0
                break
            s = sam._link(s)
            ln = sam._len(s)
        self.state = s
        self.mlen = ln
        self.eff_valid = False

    def feed_many(self, tokens: list[int]) -> None:
        for t in tokens:
            self.feed(t)

    def _dead(self, end: i64) -> bool:
        return len(self.dead.starts) > 0 and self.dead.covers(end)

    def _effective(self) -> None:
        if self.eff_valid and self.seen_version == self.dead.version:
            return
        self.seen_version = self.dead.version
        sam = self.sam
        s: i64 = self.state
        ln: i64 = self.mlen
        while s != ROOT and sam._len(sam._link(s)) >= ln:
            s = sam._link(s)
        while s != ROOT and self._dead(sam._minend(s)):
            s = sam._link(s)
            ln = sam._len(s)
        self.eff_state = s
        self.eff_len = ln
        self.eff_valid = True

    @property
    def match_len(self) -> int:
        self._effective()
        return self.eff_len

    @property
    def end_pos(self) -> int:
        self._effective()
        if self.eff_len == 0:
            return 0
        return self.sam._minend(self.eff_state)

    @property
    def occurrences(self) -> int:
        """Occurrences of the matched text (0 without a match)."""
        self._effective()
        if self.eff_len == 0:
            return 0
        self.sam._prepare_counts()
        return self.sam._cnt(self.eff_state)

    def _avail(self, start: i64, n: i64) -> i64:
        """How many of the n tokens from `start` are draftable (stop at the separator)."""
        sam = self.sam
        end: i64 = sam._ntok()
        k: i64 = 0
        while k < n and start + k < end and sam._tok(start + k) != self.stop:
            k += 1
        return k

    def draft(self, n: int) -> list[int]:
        """Up to n tokens that followed the match; shorter matches are tried when too few follow."""
        out: list[int] = []
        self._effective()
        if n <= 0 or self.eff_len == 0:
            return out
        sam = self.sam
        want: i64 = n
        s: i64 = self.eff_state
        best_start: i64 = sam._minend(s)
        best_k = self._avail(best_start, want)
        last_start = best_start
        while best_k < want:
            s = sam._link(s)
            if s == ROOT:
                break
            start: i64 = sam._minend(s)
            if start == last_start or self._dead(start):
                continue
            last_start = start
            k = self._avail(start, want)
            if k > best_k:
                best_k = k
                best_start = start
        for i in range(best_k):
            out.append(sam._tok(best_start + i))
        return out

    def draft_tree(self, max_nodes: int, max_depth: int, topk: int) -> tuple[list[int], list[int]]:
        """Best-first tree of likely continuations, scored by occurrence ratios along the path.

        Returns (tokens, parents), parents[i] < i or -1 for children of the last fed token.
        """
        tokens: list[int] = []
        parents: list[int] = []
        self._effective()
        if max_nodes <= 0 or max_depth <= 0 or topk <= 0 or self.eff_len == 0:
            return tokens, parents
        sam = self.sam
        sam._prepare_counts()
        heap: list[tuple[float, int, int, int, int, int]] = []
        seq: i64 = 0
        seq = self._push_children(heap, seq, self.eff_state, -1, 1.0, 1, topk)
        while heap and len(tokens) < max_nodes:
            neg, _, tok, st, parent, depth = heapq.heappop(heap)
            node = len(tokens)
            tokens.append(tok)
            parents.append(parent)
            if depth < max_depth:
                seq = self._push_children(heap, seq, st, node, -neg, depth + 1, topk)
        return tokens, parents

    def _push_children(
        self,
        heap: list[tuple[float, int, int, int, int, int]],
        seq: i64,
        s: i64,
        node: int,
        score: float,
        depth: int,
        topk: int,
    ) -> i64:
        sam = self.sam
        total: i64 = sam._cnt(s)
        if total <= 0:
            return seq
        toks: list[int] = []
        dsts: list[int] = []
        sam._children(s, toks, dsts)
        # Keep the topk children by count (ties: smaller token id), skipping the separator and
        # continuations first seen in removed documents.
        best: list[tuple[int, int, int]] = []
        for i in range(len(toks)):
            t = toks[i]
            if t == self.stop:
                continue
            d = dsts[i]
            c = sam._cnt(d)
            if len(best) == topk and (c < best[-1][0] or (c == best[-1][0] and t > -best[-1][1])):
                continue
            if self._dead(sam._minend(d)):
                continue
            best.append((c, -t, d))
            best.sort(reverse=True)
            if len(best) > topk:
                best.pop()
        for c2, negt, d2 in best:
            heapq.heappush(heap, (-(score * c2 / float(total)), seq, -negt, d2, node, depth))
            seq += 1
        return seq


class MultiCursor:
    """One MatchCursor per automaton (index segments); answers with the best of them.

    Best = the longest match; ties go to the match with more occurrences, then to the earlier
    cursor. `segment` says which cursor answered (-1 without a match).
    """

    cursors: list[MatchCursor]

    def __init__(self, cursors: list[MatchCursor]) -> None:
        self.cursors = cursors

    def feed(self, token: int) -> None:
        for c in self.cursors:
            c.feed(token)

    def feed_many(self, tokens: list[int]) -> None:
        for t in tokens:
            self.feed(t)

    def reset(self) -> None:
        for c in self.cursors:
            c.reset()

    def _choose(self) -> i64:
        # Not cached: removing a document can change the answer without a feed.
        best: i64 = -1
        best_len: i64 = 0
        best_cnt: i64 = 0
        for i in range(len(self.cursors)):
            cur = self.cursors[i]
            ln: i64 = cur.match_len
            if ln == 0 or ln < best_len:
                continue
            occ: i64 = cur.occurrences
            if ln > best_len or occ > best_cnt:
                best = i
                best_len = ln
                best_cnt = occ
        return best

    @property
    def segment(self) -> int:
        return self._choose()

    @property
    def match_len(self) -> int:
        b = self._choose()
        return 0 if b < 0 else self.cursors[b].match_len

    @property
    def end_pos(self) -> int:
        b = self._choose()
        return 0 if b < 0 else self.cursors[b].end_pos

    @property
    def occurrences(self) -> int:
        b = self._choose()
        return 0 if b < 0 else self.cursors[b].occurrences

    def draft(self, n: int) -> list[int]:
        b = self._choose()
        if b < 0:
            return []
        return self.cursors[b].draft(n)

    def draft_tree(self, max_nodes: int, max_depth: int, topk: int) -> tuple[list[int], list[int]]:
        b = self._choose()
        if b < 0:
            return [], []
        return self.cursors[b].draft_tree(max_nodes, max_depth, topk)
