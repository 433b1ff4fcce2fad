"""The input of a tree verification (`Engine.forward`): each input's depth and ancestors, which
an engine turns into its tree attention mask and positions, and the walk that accepts a path."""

from __future__ import annotations

from collections.abc import Callable


class TreeLayout:
    """Verification input for `[pending] + draft`: input index 0 is the pending committed token
    (not yet in the KV cache), input index i + 1 is draft node i."""

    __slots__ = ("children", "cols", "depths", "n", "parents", "rows")

    def __init__(self, tokens: list[int], parents: list[int]) -> None:
        n = len(tokens) + 1
        self.n = n
        self.parents = [-1] + [p + 1 for p in parents]  # input index of each input's parent
        depths = [0] * n
        # children[j]: token -> input index of the child, for input index j
        children: list[dict[int, int]] = [{} for _ in range(n)]
        ancestors: list[list[int]] = [[0]]
        rows: list[int] = [0]
        cols: list[int] = [0]
        for i, (tok, par) in enumerate(zip(tokens, parents, strict=True)):
            j = i + 1
            pj = par + 1
            if not 0 <= pj < j:
                raise ValueError(f"draft node {i} has parent {par}; parents must precede children")
            depths[j] = depths[pj] + 1
            # The first sibling with a token wins; duplicates can never be accepted twice.
            children[pj].setdefault(tok, j)
            anc = [*ancestors[pj], j]
            ancestors.append(anc)
            rows.extend([j] * len(anc))
            cols.extend(anc)
        self.depths = depths
        self.children = children
        self.rows = rows
        self.cols = cols

    def walk(self, choose: Callable[[int], int]) -> tuple[list[int], int]:
        """Follow the model's choices from the root: choose(j) is the token the model commits
        after input j (called once per visited input, in order, so a sampler draws exactly one
        random number per committed token). Returns (accepted input indices, bonus token)."""
        path: list[int] = []
        j = 0
        children = self.children
        while True:
            tok = choose(j)
            nxt = children[j].get(tok)
            if nxt is None:
                return path, tok
            path.append(nxt)
            j = nxt
