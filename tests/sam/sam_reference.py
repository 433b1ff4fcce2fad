"""Brute-force answers for the suffix-automaton tests (quadratic and obviously right)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence


def ends(text: Sequence[int], pat: Sequence[int]) -> list[int]:
    """All end positions (exclusive) of `pat` in `text`; an empty pattern ends everywhere."""
    m = len(pat)
    p = list(pat)
    return [e for e in range(m, len(text) + 1) if list(text[e - m : e]) == p]


def longest_match(text: Sequence[int], query: Sequence[int]) -> int:
    best = 0
    for ln in range(1, len(query) + 1):
        if ends(text, query[len(query) - ln :]):
            best = ln
        else:
            break  # a longer suffix contains this one, so it cannot occur either
    return best


def alive_match(text: Sequence[int], query: Sequence[int], dead: Callable[[int], bool]) -> int:
    """The longest suffix whose first occurrence does not end inside a removed document."""
    for ln in range(longest_match(text, query), 0, -1):
        if not dead(ends(text, query[len(query) - ln :])[0]):
            return ln
    return 0


def draft(
    text: Sequence[int],
    query: Sequence[int],
    n: int,
    stop: int = -1,
    dead: Callable[[int], bool] = lambda e: False,
) -> list[int]:
    """Tokens after the first occurrence of the match; when too few follow, a shorter match's
    continuation if it extends the longer one's."""
    ln = alive_match(text, query, dead)
    if n <= 0 or ln == 0:
        return []

    def avail(e: int) -> int:
        k = 0
        while k < n and e + k < len(text) and text[e + k] != stop:
            k += 1
        return k

    best: list[int] | None = None
    for length in range(ln, 0, -1):
        e = ends(text, query[len(query) - length :])[0]
        if dead(e):
            continue
        cont = list(text[e : e + avail(e)])
        if best is None or (len(cont) > len(best) and cont[: len(best)] == best):
            best = cont
        if len(best) >= n:
            break
    return best or []


def draft_tree(
    text: Sequence[int],
    query: Sequence[int],
    max_nodes: int,
    max_depth: int,
    topk: int,
    stop: int = -1,
    dead: Callable[[int], bool] = lambda e: False,
) -> tuple[list[int], list[int]]:
    """Best-first search over continuations, scored by occurrence ratios, by brute force."""
    ln = alive_match(text, query, dead)
    tokens: list[int] = []
    parents: list[int] = []
    if max_nodes <= 0 or max_depth <= 0 or topk <= 0 or ln == 0:
        return tokens, parents
    base = list(query[len(query) - ln :])
    heap: list[tuple[float, int, int, list[int], int, int]] = []
    seq = 0

    def push(path: list[int], node: int, score: float, depth: int) -> None:
        nonlocal seq
        total = len(ends(text, path))
        kids = []
        for c in sorted({text[e] for e in ends(text, path) if e < len(text)}):
            if c == stop:
                continue
            occ = ends(text, [*path, c])
            if dead(occ[0]):
                continue
            kids.append((len(occ), c))
        kids.sort(key=lambda x: (-x[0], x[1]))
        for cnt, c in kids[:topk]:
            heapq.heappush(heap, (-(score * cnt / float(total)), seq, c, [*path, c], node, depth))
            seq += 1

    push(base, -1, 1.0, 1)
    while heap and len(tokens) < max_nodes:
        neg, _, tok, path, parent, depth = heapq.heappop(heap)
        node = len(tokens)
        tokens.append(tok)
        parents.append(parent)
        if depth < max_depth:
            push(path, node, -neg, depth + 1)
    return tokens, parents
