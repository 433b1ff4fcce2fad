"""Suffix automata over token ids, on packed native arrays (librt.vecs).

mypyc compiles this module at install time (see setup.py); the very same source runs interpreted
as the pure-Python fallback (samchat.sam loads it by path), so both behave identically.

States are numbered from 0 (the root). While an automaton grows, each state is one 8-field
record (suffix link, length, first end position, first edge inline - most states have exactly
one - head of its list of further edges, edge count); further edges live in an open-addressing
table of [state << 32 | token, target] pairs, listed per state so that clones can copy them.
`freeze()` counts occurrences (one pass over the link tree in decreasing length) and replaces
all that by flat arrays, which are also the on-disk layout of an index segment:
    text, link, slen, minend, cnt   per token / per state (minend: exclusive end of the first
                                    occurrence; cnt: number of occurrences)
    off, etok, edst                 edges of state s at [off[s], off[s+1]), sorted by token
    hub_state, hub_tok, hub_dst     the HUB_K most frequent children of high-fanout states
Token arrays are int16 (read back as 0..65535) when every id fits. MappedAutomaton reads the
same arrays in place from a memory map.
"""

import heapq
from typing import Final, cast, final

from librt.vecs import append, extend, vec
from mypy_extensions import i16, i32, i64

ROOT: Final = 0
# Shared int objects for 16-bit token ids, so that drafts need not allocate them.
_INTS: Final[list[object]] = list(range(0x10000))
# States with more edges than HUB_MIN keep their HUB_K most frequent children in a side table,
# so that tree drafts need not scan thousands of edges.
HUB_MIN: Final = 16
HUB_K: Final = 8
_MAX_TOKEN: Final = 0x7FFFFFFF
_MAX_TEXT: Final = (1 << 30) - 1  # states (< 2 per token) must fit in int32
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

    def _is_frozen(self) -> bool:
        """Frozen automata never split states, so cursors skip the re-anchoring step."""
        raise NotImplementedError

    def _span(self, start: i64, n: i64) -> list[int]:
        """Tokens [start, start + n) clipped to the text (one bulk read)."""
        raise NotImplementedError

    def _take(self, start: i64, n: i64, stop: i64) -> list[int]:
        """Like _span, but ending before the first `stop` token."""
        toks = self._span(start, n)
        if stop >= 0:
            for i in range(len(toks)):
                if toks[i] == stop:
                    return toks[:i]
        return toks

    def _fanout(self, s: i64) -> i64:
        """Number of edges of s (frozen layouts only; -1 when unknown)."""
        return -1

    def _hub(self, s: i64) -> i64:
        """Row of s in the table of top children of high-fanout states, or -1."""
        return -1

    def _hub_tok(self, row: i64, j: i64) -> i64:
        raise NotImplementedError

    def _hub_dst(self, row: i64, j: i64) -> i64:
        raise NotImplementedError

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

    def nbytes(self) -> int:
        """Heap bytes held by the arrays (0 for a memory map: the page cache holds those)."""
        return 0

    def count(self, s: int) -> int:
        """Occurrences of the strings of state s in the text."""
        self._prepare_counts()
        return self._cnt(s)


# Fields of a state record while the automaton grows (one cache line holds two records):
# suffix link, length, first end, first edge (token, target), head of its list of further edges.
_REC: Final = 8
_LINK: Final = 0
_LEN: Final = 1
_END: Final = 2
_FTOK: Final = 3
_FDST: Final = 4
_XHEAD: Final = 5
_DEG: Final = 6  # number of edges, so that freeze() need not count them


def _zeros32(n: i64) -> vec[i32]:
    # Built from a zeroed buffer: one memcpy instead of n appends.
    return vec[i32](memoryview(bytearray(4 * n)).cast("i"))


def _empty_table(slots: i64) -> vec[i64]:
    # [key, target] pairs, every key _EMPTY (all bits set).
    return vec[i64](memoryview(b"\xff" * (16 * slots)).cast("q"))


@final
class SuffixAutomaton(Automaton):
    """Online suffix automaton; `freeze()` counts occurrences and compacts the edges."""

    text: vec[i32]
    # growing layout
    rec: vec[i32]
    nst: i64
    x_tok: vec[i32]
    x_next: vec[i32]
    table: vec[i64]
    tmask: i64
    tused: i64
    last: i64
    frozen: bool
    counted_at: i64
    cnt: vec[i32]
    # frozen layout (also the on-disk layout)
    link: vec[i32]
    slen: vec[i32]
    minend: vec[i32]
    off: vec[i32]
    etok: vec[i32]
    edst: vec[i32]
    hub_state: vec[i32]
    hub_tok: vec[i32]
    hub_dst: vec[i32]
    # Frozen automata whose token ids all fit in 16 bits keep text and edge tokens as
    # int16 (read back masked to 0..65535): the in-memory twin of the uint16 file arrays.
    narrow: bool
    ntext: i64
    text16: vec[i16]
    etok16: vec[i16]

    def __init__(self, capacity: int = 0) -> None:
        cap: i64 = capacity if capacity > 16 else 16
        self.text = vec[i32](capacity=cap)
        self.rec = _zeros32(_REC * (cap + cap // 2 + 2))
        self.nst = 0
        self.x_tok = vec[i32](capacity=cap)
        self.x_next = vec[i32](capacity=cap)
        slots: i64 = 64
        while slots < cap * 2:
            slots *= 2
        self.table = _empty_table(slots)
        self.tmask = slots - 1
        self.tused = 0
        self.last = ROOT
        self.frozen = False
        self.counted_at = -1
        self.cnt = vec[i32]()
        self.link = vec[i32]()
        self.slen = vec[i32]()
        self.minend = vec[i32]()
        self.off = vec[i32]()
        self.etok = vec[i32]()
        self.edst = vec[i32]()
        self.hub_state = vec[i32]()
        self.hub_tok = vec[i32]()
        self.hub_dst = vec[i32]()
        self.narrow = False
        self.ntext = 0
        self.text16 = vec[i16]()
        self.etok16 = vec[i16]()
        self._new_state(0, 0)

    # -- building ---------------------------------------------------------------------------

    def _new_state(self, length: i64, end: i64) -> i64:
        s: i64 = self.nst
        b: i64 = s * _REC
        if b + _REC > len(self.rec):
            self.rec = extend(self.rec, memoryview(bytearray(4 * len(self.rec))).cast("i"))
        rec = self.rec
        rec[b + _LINK] = -1
        rec[b + _LEN] = i32(length)
        rec[b + _END] = i32(end)
        rec[b + _FTOK] = -1
        rec[b + _FDST] = -1
        rec[b + _XHEAD] = -1
        rec[b + _DEG] = 0
        self.nst = s + 1
        return s

    def _slot(self, s: i64, c: i64) -> i64:
        """Index (of the key) where (s, c) is in the table, or of the empty slot for it."""
        key: i64 = (s << 32) | c
        h: i64 = ((s * _HA + c * _HB) >> 13) & self.tmask
        table = self.table
        while True:
            k = table[2 * h]
            if k == key or k == _EMPTY:  # noqa: SIM109 - no tuple in the hot loop
                return 2 * h
            h = (h + 1) & self.tmask

    def _grow_table(self) -> None:
        old = self.table
        slots: i64 = len(old)  # twice as many slots as before (each slot is two entries)
        self.table = _empty_table(slots)
        self.tmask = slots - 1
        for i in range(0, len(old), 2):
            k = old[i]
            if k != _EMPTY:
                j = self._slot(k >> 32, k & 0xFFFFFFFF)
                self.table[j] = k
                self.table[j + 1] = old[i + 1]

    def _get(self, s: i64, c: i64) -> i64:
        b: i64 = s * _REC
        if i64(self.rec[b + _FTOK]) == c:
            return i64(self.rec[b + _FDST])
        if self.rec[b + _XHEAD] < 0:
            return -1
        j = self._slot(s, c)
        if self.table[j] == _EMPTY:
            return -1
        return self.table[j + 1]

    def _add(self, s: i64, c: i64, d: i64) -> None:
        """Add the edge (s, c) -> d; it must not exist yet."""
        b: i64 = s * _REC
        if self.rec[b + _FTOK] < 0:
            self.rec[b + _FTOK] = i32(c)
            self.rec[b + _FDST] = i32(d)
            self.rec[b + _DEG] = 1
            return
        self._add_extra(s, c, d, -1)

    def _add_extra(self, s: i64, c: i64, d: i64, j: i64) -> None:
        """Add (s, c) -> d to the table; j is its empty slot when already probed, else -1."""
        b: i64 = s * _REC
        if 4 * (self.tused + 1) > len(self.table):  # keep the table at most half full
            self._grow_table()
            j = -1
        if j < 0:
            j = self._slot(s, c)
        e: i64 = len(self.x_tok)
        self.x_tok = append(self.x_tok, i32(c))
        self.x_next = append(self.x_next, self.rec[b + _XHEAD])
        self.rec[b + _XHEAD] = i32(e)
        self.rec[b + _DEG] = self.rec[b + _DEG] + 1
        self.table[j] = (s << 32) | c
        self.table[j + 1] = d
        self.tused += 1

    def _swap(self, s: i64, c: i64, old: i64, new: i64) -> bool:
        """Point the edge (s, c) at `new` if it points at `old`."""
        b: i64 = s * _REC
        if i64(self.rec[b + _FTOK]) == c:
            if i64(self.rec[b + _FDST]) != old:
                return False
            self.rec[b + _FDST] = i32(new)
            return True
        j = self._slot(s, c)
        if self.table[j] == _EMPTY or self.table[j + 1] != old:
            return False
        self.table[j + 1] = new
        return True

    def extend(self, token: int) -> None:
        """Append one token (amortised O(1))."""
        if self.frozen:
            raise ValueError("cannot extend a frozen suffix automaton")
        if token < 0 or token > _MAX_TOKEN:
            raise ValueError(f"token id {token} is out of range")
        if len(self.text) >= _MAX_TEXT:
            raise ValueError("a suffix automaton holds at most 2**30 - 1 tokens")
        c: i64 = token
        self.text = append(self.text, i32(c))
        n: i64 = len(self.text)
        cur = self._new_state(n, n)
        p: i64 = self.last
        q: i64 = -1
        rec = self.rec
        while p >= 0:
            b: i64 = p * _REC
            ft: i64 = i64(rec[b + _FTOK])
            if ft == c:
                q = i64(rec[b + _FDST])
                break
            if ft < 0:
                rec[b + _FTOK] = i32(c)
                rec[b + _FDST] = i32(cur)
                rec[b + _DEG] = 1
            elif rec[b + _XHEAD] < 0:
                self._add_extra(p, c, cur, -1)
            else:
                j = self._slot(p, c)
                if self.table[j] != _EMPTY:
                    q = self.table[j + 1]
                    break
                self._add_extra(p, c, cur, j)
            p = i64(rec[b + _LINK])
        if p < 0:
            rec[cur * _REC + _LINK] = ROOT
        elif i64(rec[p * _REC + _LEN]) + 1 == i64(rec[q * _REC + _LEN]):
            rec[cur * _REC + _LINK] = i32(q)
        else:
            qb: i64 = q * _REC
            clone = self._new_state(i64(rec[p * _REC + _LEN]) + 1, i64(rec[qb + _END]))
            rec = self.rec  # _new_state may have grown it
            cb: i64 = clone * _REC
            rec[cb + _LINK] = rec[qb + _LINK]
            rec[cb + _FTOK] = rec[qb + _FTOK]
            rec[cb + _FDST] = rec[qb + _FDST]
            rec[cb + _DEG] = 1 if rec[qb + _FTOK] >= 0 else 0
            e: i64 = i64(rec[qb + _XHEAD])
            while e >= 0:
                t: i64 = i64(self.x_tok[e])
                self._add(clone, t, self.table[self._slot(q, t) + 1])
                e = i64(self.x_next[e])
            while p >= 0 and self._swap(p, c, q, clone):
                p = i64(self.rec[p * _REC + _LINK])
            self.rec[qb + _LINK] = i32(clone)
            self.rec[cur * _REC + _LINK] = i32(clone)
        self.last = cur

    def extend_many(self, tokens: list[int]) -> None:
        for t in tokens:
            self.extend(t)

    def _state_arrays(self) -> tuple[vec[i32], vec[i32], vec[i32]]:
        """(link, slen, minend) as flat arrays (the frozen layout)."""
        if self.frozen:
            return self.link, self.slen, self.minend
        ns: i64 = self.nst
        rec = self.rec
        link = _zeros32(ns)
        slen = _zeros32(ns)
        minend = _zeros32(ns)
        for s in range(ns):
            b: i64 = s * _REC
            link[s] = rec[b + _LINK]
            slen[s] = rec[b + _LEN]
            minend[s] = rec[b + _END]
        return link, slen, minend

    def _compute_counts(self) -> None:
        link, slen, minend = self._state_arrays()
        self.cnt = _counts(link, slen, minend, self._ntok())
        self.counted_at = self._ntok()

    def _prepare_counts(self) -> None:
        if self.counted_at != self._ntok():
            self._compute_counts()

    def freeze(self) -> None:
        """Count occurrences and replace the growing tables by the compact sorted ones."""
        if self.frozen:
            return
        link, slen, minend = self._state_arrays()
        n: i64 = len(self.text)
        self.cnt = _counts(link, slen, minend, n)
        self.counted_at = n
        ns: i64 = self.nst
        rec = self.rec
        off = _zeros32(ns + 1)
        for s in range(ns):
            off[s + 1] = off[s] + rec[s * _REC + _DEG]
        ne: i64 = i64(off[ns])
        # Edges as (token << 32 | target): one array to scatter into and to sort.
        pairs = vec[i64](memoryview(bytearray(8 * ne)).cast("q"))
        fill = vec[i32](off)
        for s in range(ns):
            b: i64 = s * _REC
            if rec[b + _FTOK] >= 0:
                pairs[i64(fill[s])] = (i64(rec[b + _FTOK]) << 32) | i64(rec[b + _FDST])
                fill[s] = fill[s] + 1
        table = self.table
        for i in range(0, len(table), 2):
            k = table[i]
            if k != _EMPTY:
                s3: i64 = k >> 32
                at: i64 = i64(fill[s3])
                pairs[at] = ((k & 0xFFFFFFFF) << 32) | table[i + 1]
                fill[s3] = i32(at + 1)
        self.table = vec[i64]()  # free it before the next allocations
        hub_state = vec[i32]()
        hub_tok = vec[i32]()
        hub_dst = vec[i32]()
        cnt = self.cnt
        for s in range(ns):
            lo: i64 = i64(off[s])
            hi: i64 = i64(off[s + 1])
            if hi - lo > 1:
                _sort_pairs(pairs, lo, hi)
            if hi - lo > HUB_MIN:
                hub_state = append(hub_state, i32(s))
                top = _top_children(pairs, cnt, lo, hi)
                for j in range(HUB_K):
                    p = pairs[top[j]]
                    hub_tok = append(hub_tok, i32(p >> 32))
                    hub_dst = append(hub_dst, i32(p & 0xFFFFFFFF))
        text = self.text
        narrow = True
        for i in range(len(text)):
            if text[i] > 0xFFFF:
                narrow = False
                break
        edst = _zeros32(ne)
        if narrow:
            # Every id fits in 16 bits: text and edge tokens as int16 (read back masked).
            etok16 = vec[i16](memoryview(bytearray(2 * ne)).cast("h"))
            for i in range(ne):
                p2 = pairs[i]
                t: i64 = p2 >> 32
                etok16[i] = i16(t - 0x10000 if t > 0x7FFF else t)
                edst[i] = i32(p2 & 0xFFFFFFFF)
            self.etok16 = etok16
            self.text16 = _to16(text)
            self.ntext = len(text)
            self.text = vec[i32]()
            self.narrow = True
        else:
            etok = _zeros32(ne)
            for i in range(ne):
                p3 = pairs[i]
                etok[i] = i32(p3 >> 32)
                edst[i] = i32(p3 & 0xFFFFFFFF)
            self.etok = etok
        self.hub_state = hub_state
        self.hub_tok = hub_tok
        self.hub_dst = hub_dst
        self.link = link
        self.slen = slen
        self.minend = minend
        self.off = off
        self.edst = edst
        self.rec = vec[i32]()
        self.x_tok = vec[i32]()
        self.x_next = vec[i32]()
        self.tmask = 0
        self.frozen = True

    # -- queries ----------------------------------------------------------------------------

    def _ntok(self) -> i64:
        return self.ntext if self.narrow else len(self.text)

    def _nstates(self) -> i64:
        return len(self.slen) if self.frozen else self.nst

    def _tok(self, pos: i64) -> i64:
        if self.narrow:
            return i64(self.text16[pos]) & 0xFFFF
        return i64(self.text[pos])

    def _len(self, s: i64) -> i64:
        if self.frozen:
            return i64(self.slen[s])
        return i64(self.rec[s * _REC + _LEN])

    def _link(self, s: i64) -> i64:
        if self.frozen:
            return i64(self.link[s])
        return i64(self.rec[s * _REC + _LINK])

    def _minend(self, s: i64) -> i64:
        if self.frozen:
            return i64(self.minend[s])
        return i64(self.rec[s * _REC + _END])

    def _cnt(self, s: i64) -> i64:
        return i64(self.cnt[s])

    def _is_frozen(self) -> bool:
        return self.frozen

    def _span(self, start: i64, n: i64) -> list[int]:
        end: i64 = min(start + n, self._ntok())
        if self.narrow:
            return [i64(self.text16[i]) & 0xFFFF for i in range(start, end)]
        return [i64(self.text[i]) for i in range(start, end)]

    def _take(self, start: i64, n: i64, stop: i64) -> list[int]:
        end: i64 = min(start + n, self._ntok())
        if not self.narrow:
            out: list[int] = []
            for i in range(start, end):
                x: i64 = i64(self.text[i])
                if x == stop:
                    break
                out.append(x)
            return out
        # Ids below 65536: hand out shared int objects instead of allocating one per token.
        boxed: list[object] = []
        for j in range(start, end):
            y: i64 = i64(self.text16[j]) & 0xFFFF
            if y == stop:
                break
            boxed.append(_INTS[y])
        return cast(list[int], boxed)

    def _fanout(self, s: i64) -> i64:
        if not self.frozen:
            return -1
        return i64(self.off[s + 1]) - i64(self.off[s])

    def _hub(self, s: i64) -> i64:
        lo: i64 = 0
        hi: i64 = len(self.hub_state)
        while lo < hi:
            mid = (lo + hi) >> 1
            v: i64 = i64(self.hub_state[mid])
            if v < s:
                lo = mid + 1
            elif v > s:
                hi = mid
            else:
                return mid
        return -1

    def _hub_tok(self, row: i64, j: i64) -> i64:
        return i64(self.hub_tok[row * HUB_K + j])

    def _hub_dst(self, row: i64, j: i64) -> i64:
        return i64(self.hub_dst[row * HUB_K + j])

    def _next(self, s: i64, c: i64) -> i64:
        if not self.frozen:
            return self._get(s, c)
        lo: i64 = i64(self.off[s])
        hi: i64 = i64(self.off[s + 1])
        while lo < hi:
            mid = (lo + hi) >> 1
            t: i64 = (i64(self.etok16[mid]) & 0xFFFF) if self.narrow else i64(self.etok[mid])
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
                toks.append((i64(self.etok16[i]) & 0xFFFF) if self.narrow else i64(self.etok[i]))
                dsts.append(i64(self.edst[i]))
            return
        b: i64 = s * _REC
        if self.rec[b + _FTOK] < 0:
            return
        toks.append(i64(self.rec[b + _FTOK]))
        dsts.append(i64(self.rec[b + _FDST]))
        e: i64 = i64(self.rec[b + _XHEAD])
        while e >= 0:
            t: i64 = i64(self.x_tok[e])
            toks.append(t)
            dsts.append(self.table[self._slot(s, t) + 1])
            e = i64(self.x_next[e])

    @property
    def is_frozen(self) -> bool:
        return self.frozen

    def arrays(self) -> list[tuple[str, memoryview]]:
        """The frozen layout, in file order: (name, buffer of int32, or int16 holding uint16)."""
        if not self.frozen:
            raise ValueError("freeze() the automaton before saving it")
        text = memoryview(self.text16) if self.narrow else memoryview(self.text)
        etok = memoryview(self.etok16) if self.narrow else memoryview(self.etok)
        return [
            ("text", text),
            ("link", memoryview(self.link)),
            ("slen", memoryview(self.slen)),
            ("minend", memoryview(self.minend)),
            ("cnt", memoryview(self.cnt)),
            ("off", memoryview(self.off)),
            ("etok", etok),
            ("edst", memoryview(self.edst)),
            ("hub_state", memoryview(self.hub_state)),
            ("hub_tok", memoryview(self.hub_tok)),
            ("hub_dst", memoryview(self.hub_dst)),
        ]

    def nbytes(self) -> int:
        """Bytes held by the arrays (spare capacity of the growing record table included)."""
        total: i64 = 4 * (
            len(self.text)
            + len(self.rec)
            + len(self.x_tok)
            + len(self.x_next)
            + len(self.cnt)
            + len(self.link)
            + len(self.slen)
            + len(self.minend)
            + len(self.off)
            + len(self.etok)
            + len(self.edst)
            + len(self.hub_state)
            + len(self.hub_tok)
            + len(self.hub_dst)
        )
        return total + 8 * len(self.table) + 2 * (len(self.text16) + len(self.etok16))


def _to16(v: vec[i32]) -> vec[i16]:
    """Values 0..65535 as int16 (the same two bytes as uint16)."""
    out = vec[i16](capacity=len(v))
    for i in range(len(v)):
        x: i64 = i64(v[i])
        out = append(out, i16(x - 0x10000 if x > 0x7FFF else x))
    return out


def frozen_from(wide: dict[str, vec[i32]], narrow: dict[str, vec[i16]]) -> SuffixAutomaton:
    """A frozen automaton over arrays read from a segment file (text and etok may be narrow)."""
    sam = SuffixAutomaton()
    sam.rec = vec[i32]()
    sam.x_tok = vec[i32]()
    sam.x_next = vec[i32]()
    sam.table = vec[i64]()
    sam.link = wide["link"]
    sam.slen = wide["slen"]
    sam.minend = wide["minend"]
    sam.cnt = wide["cnt"]
    sam.off = wide["off"]
    sam.edst = wide["edst"]
    sam.hub_state = wide["hub_state"]
    sam.hub_tok = wide["hub_tok"]
    sam.hub_dst = wide["hub_dst"]
    if "text" in narrow:
        sam.text16 = narrow["text"]
        sam.etok16 = narrow["etok"]
        sam.ntext = len(sam.text16)
        sam.narrow = True
    else:
        sam.text = wide["text"]
        sam.etok = wide["etok"]
    sam.nst = len(sam.slen)
    sam.frozen = True
    sam.counted_at = sam._ntok()
    return sam


def _counts(link: vec[i32], slen: vec[i32], minend: vec[i32], n: i64) -> vec[i32]:
    """cnt_endpos of every state: one pass over the link tree in decreasing length."""
    ns: i64 = len(slen)
    # Counting sort of the states by length.
    buckets = _zeros32(n + 2)
    for s in range(ns):
        ln: i64 = i64(slen[s])
        buckets[ln] = buckets[ln] + 1
    acc: i64 = 0
    for ln2 in range(n + 1):
        b: i64 = i64(buckets[ln2])
        buckets[ln2] = i32(acc)
        acc += b
    order = _zeros32(ns)
    for s in range(ns):
        ln3: i64 = i64(slen[s])
        order[i64(buckets[ln3])] = i32(s)
        buckets[ln3] = buckets[ln3] + 1
    cnt = _zeros32(ns)
    for s in range(1, ns):
        # Originals (made by extend at step i) have length == minend == i; a clone copies
        # minend from a longer state, so its length is below it. Only originals own an end.
        if slen[s] == minend[s]:
            cnt[s] = 1
    i: i64 = ns - 1
    while i > 0:
        s2: i64 = i64(order[i])
        up: i64 = i64(link[s2])
        cnt[up] = cnt[up] + cnt[s2]
        i -= 1
    return cnt


def _top_children(pairs: vec[i64], cnt: vec[i32], lo: i64, hi: i64) -> vec[i64]:
    """Indices of the HUB_K most frequent children among the edges [lo, hi) (sorted by token),
    most frequent first, ties to the smaller token: the order tree drafts use."""
    top = vec[i64]()
    for i in range(lo, hi):
        c: i64 = i64(cnt[pairs[i] & 0xFFFFFFFF])
        if len(top) == HUB_K and c <= i64(cnt[pairs[top[HUB_K - 1]] & 0xFFFFFFFF]):
            continue  # a tie keeps the earlier, smaller token
        if len(top) < HUB_K:
            top = append(top, i)
        else:
            top[HUB_K - 1] = i
        k: i64 = len(top) - 1
        while k > 0 and i64(cnt[pairs[top[k - 1]] & 0xFFFFFFFF]) < c:
            top[k] = top[k - 1]
            k -= 1
        top[k] = i
    return top


def _sift_down(pairs: vec[i64], lo: i64, root: i64, n: i64) -> None:
    while True:
        child: i64 = 2 * root + 1
        if child >= n:
            return
        if child + 1 < n and pairs[lo + child] < pairs[lo + child + 1]:
            child += 1
        if pairs[lo + root] >= pairs[lo + child]:
            return
        t: i64 = pairs[lo + root]
        pairs[lo + root] = pairs[lo + child]
        pairs[lo + child] = t
        root = child


def _sort_pairs(pairs: vec[i64], lo: i64, hi: i64) -> None:
    """Sort [lo, hi) (by token, the high half): insertion sort for the usual few, heapsort for
    hubs."""
    n: i64 = hi - lo
    if n > 32:
        i: i64 = n // 2 - 1
        while i >= 0:
            _sift_down(pairs, lo, i, n)
            i -= 1
        end: i64 = n - 1
        while end > 0:
            t0: i64 = pairs[lo]
            pairs[lo] = pairs[lo + end]
            pairs[lo + end] = t0
            _sift_down(pairs, lo, 0, end)
            end -= 1
        return
    for k in range(lo + 1, hi):
        t: i64 = pairs[k]
        j: i64 = k - 1
        while j >= lo and pairs[j] > t:
            pairs[j + 1] = pairs[j]
            j -= 1
        pairs[j + 1] = t


def build(tokens: list[int], freeze: bool = True) -> SuffixAutomaton:
    """A suffix automaton over `tokens` (frozen by default)."""
    sam = SuffixAutomaton(len(tokens))
    for t in tokens:
        sam.extend(t)
    if freeze:
        sam.freeze()
    return sam


ARRAY_NAMES: Final = (
    "text",
    "link",
    "slen",
    "minend",
    "cnt",
    "off",
    "etok",
    "edst",
    "hub_state",
    "hub_tok",
    "hub_dst",
)


@final
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
    hub_state: memoryview
    hub_tok: memoryview
    hub_dst: memoryview
    ntok: i64
    nst: i64
    nhub: i64
    root: dict[int, int]

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
        self.hub_state = views[8]
        self.hub_tok = views[9]
        self.hub_dst = views[10]
        self.ntok = len(self.text)
        self.nst = len(self.slen)
        self.nhub = len(self.hub_state)
        # Every failed match ends at the root, whose edges are as many as distinct tokens: a
        # dict answers there in one step instead of a long binary search through the map.
        self.root = {}
        if self.nst > 0:
            lo: int = self.off[0]
            hi: int = self.off[1]
            self.root = dict(zip(self.etok[lo:hi].tolist(), self.edst[lo:hi].tolist(), strict=True))

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

    def _is_frozen(self) -> bool:
        return True

    def _span(self, start: i64, n: i64) -> list[int]:
        return self.text[start : start + n].tolist()

    def _fanout(self, s: i64) -> i64:
        lo: int = self.off[s]
        hi: int = self.off[s + 1]
        return hi - lo

    def _hub(self, s: i64) -> i64:
        lo: i64 = 0
        hi: i64 = self.nhub
        hs = self.hub_state
        while lo < hi:
            mid = (lo + hi) >> 1
            v: i64 = hs[mid]
            if v < s:
                lo = mid + 1
            elif v > s:
                hi = mid
            else:
                return mid
        return -1

    def _hub_tok(self, row: i64, j: i64) -> i64:
        v: int = self.hub_tok[row * HUB_K + j]
        return v

    def _hub_dst(self, row: i64, j: i64) -> i64:
        v: int = self.hub_dst[row * HUB_K + j]
        return v

    def _next(self, s: i64, c: i64) -> i64:
        if s == ROOT:
            return self.root.get(c, -1)
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


@final
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
        # Each array read once: a drafting thread may run while set() replaces both.
        starts = self.starts
        ends = self.ends
        n: i64 = min(len(starts), len(ends))
        if n == 0 or end <= 0:
            return False
        pos: i64 = end - 1
        lo: i64 = 0
        hi: i64 = n
        while lo < hi:
            mid = (lo + hi) >> 1
            if i64(starts[mid]) <= pos:
                lo = mid + 1
            else:
                hi = mid
        return lo > 0 and pos < i64(ends[lo - 1])


@final
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
    frozen: bool

    def __init__(self, sam: Automaton, stop_token: int = -1, dead: DeadSpans | None = None) -> None:
        self.sam = sam
        self.frozen = sam._is_frozen()
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
        if not self.frozen:
            self.frozen = sam._is_frozen()
        c: i64 = token
        s: i64 = self.state
        ln: i64 = self.mlen
        # A growing automaton may have split our state since the last feed (a clone took the
        # shorter strings); climb to the state that really holds the current match.
        if not self.frozen:
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
        if not self.frozen:
            while s != ROOT and sam._len(sam._link(s)) >= ln:
                s = sam._link(s)
        if self.dead.size() == 0:
            self.eff_state = s
            self.eff_len = ln
            self.eff_valid = True
            return
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

    def _take(self, start: i64, n: i64) -> list[int]:
        """The draftable tokens among the n from `start`: up to the separator."""
        return self.sam._take(start, n, self.stop)

    def draft(self, n: int) -> list[int]:
        """Up to n tokens that followed the match. When too few follow its first occurrence
        (a document or the text ends), shorter matches are tried, but only a continuation that
        extends the longer match's own is taken: another one would contradict the better
        evidence."""
        self._effective()
        if n <= 0 or self.eff_len == 0:
            return []
        sam = self.sam
        want: i64 = n
        s: i64 = self.eff_state
        last_start: i64 = sam._minend(s)
        best = self._take(last_start, want)
        while len(best) < want:
            s = sam._link(s)
            if s == ROOT:
                break
            start: i64 = sam._minend(s)
            if start == last_start or self._dead(start):
                continue
            last_start = start
            toks = self._take(start, want)
            if len(toks) > len(best) and toks[: len(best)] == best:
                best = toks
        return best

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
        if topk <= HUB_K and sam._fanout(s) > HUB_MIN:
            row = sam._hub(s)
            if row >= 0:
                # The table holds the first HUB_K children in draft order: when enough of them
                # are draftable they are exactly the topk a full scan would pick.
                picked: list[tuple[int, int]] = []
                for j in range(HUB_K):
                    t0 = sam._hub_tok(row, j)
                    d0 = sam._hub_dst(row, j)
                    if t0 == self.stop or self._dead(sam._minend(d0)):
                        continue
                    picked.append((t0, d0))
                    if len(picked) == topk:
                        for t1, d1 in picked:
                            c1: int = sam._cnt(d1)
                            heapq.heappush(
                                heap, (-(score * c1 / float(total)), seq, t1, d1, node, depth)
                            )
                            seq += 1
                        return seq
        toks: list[int] = []
        dsts: list[int] = []
        sam._children(s, toks, dsts)
        # Keep the topk children by count (ties: smaller token id), skipping the separator and
        # continuations first seen in removed documents; kept sorted in three parallel lists.
        bc: list[int] = []
        bt: list[int] = []
        bd: list[int] = []
        stop = self.stop
        for i in range(len(toks)):
            t: i64 = toks[i]
            if t == stop:
                continue
            d: i64 = dsts[i]
            c: i64 = sam._cnt(d)
            m: i64 = len(bc)
            if m == topk and (c < bc[m - 1] or (c == bc[m - 1] and t > bt[m - 1])):
                continue
            if self._dead(sam._minend(d)):
                continue
            k: i64 = m
            while k > 0 and (bc[k - 1] < c or (bc[k - 1] == c and bt[k - 1] > t)):
                k -= 1
            bc.insert(k, c)
            bt.insert(k, t)
            bd.insert(k, d)
            if m + 1 > topk:
                bc.pop()
                bt.pop()
                bd.pop()
        for j in range(len(bc)):
            c2: int = bc[j]
            heapq.heappush(heap, (-(score * c2 / float(total)), seq, bt[j], bd[j], node, depth))
            seq += 1
        return seq


@final
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

    def copy(self) -> "MultiCursor":
        """Same position, independent afterwards."""
        return MultiCursor([c.copy() for c in self.cursors])

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
            if ln > best_len:
                best = i
                best_len = ln
                best_cnt = -1  # counted only if another cursor ties
                continue
            if best_cnt < 0:
                best_cnt = self.cursors[best].occurrences
            occ: i64 = cur.occurrences
            if occ > best_cnt:
                best = i
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
