"""Draft trees: candidate tokens continuing the committed text, merged and cut as the policy
asks; each gives the engines its verification layout (samchat/engines/layout.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from samchat.engines.layout import TreeLayout
from samchat.names import DraftSource, merged_source


@dataclass
class DraftTree:
    """Candidate tokens continuing the committed text, in topological order.

    parents[i] is the index of node i's parent (< i), or -1 for a child of the last committed
    token. A sequence draft has parents == [-1, 0, 1, 2, ...].
    """

    tokens: list[int]
    parents: list[int]
    source: DraftSource
    # The drafter of each node where they differ (a merged tree); None: all `source`.
    node_sources: list[str] | None = None
    _layout: TreeLayout | None = field(default=None, repr=False, compare=False)

    @classmethod
    def sequence(cls, tokens: list[int], source: DraftSource) -> DraftTree:
        return cls(list(tokens), list(range(-1, len(tokens) - 1)), source)

    @classmethod
    def merge(cls, first: DraftTree, second: DraftTree) -> DraftTree:
        """One tree holding both drafts (a trie: a node both propose appears once, credited to
        `first`), so one forward verifies both and the longer accepted path wins."""
        tokens = list(first.tokens)
        parents = list(first.parents)
        sources = [first.source_at(i) for i in range(len(first))]
        children: dict[tuple[int, int], int] = {}
        for i, (tok, par) in enumerate(zip(tokens, parents, strict=True)):
            children.setdefault((par, tok), i)
        mapped: list[int] = []
        for i, (tok, par) in enumerate(zip(second.tokens, second.parents, strict=True)):
            parent = mapped[par] if par >= 0 else -1
            node = children.get((parent, tok))
            if node is None:
                node = len(tokens)
                tokens.append(tok)
                parents.append(parent)
                sources.append(second.source_at(i))
                children[(parent, tok)] = node
            mapped.append(node)
        return cls(tokens, parents, merged_source(first.source), sources)

    def source_at(self, node: int) -> str:
        return self.node_sources[node] if self.node_sources is not None else self.source

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def is_sequence(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def first_path(self) -> DraftTree:
        """The path through each node's first child: a sequence draft."""
        tokens: list[int] = []
        sources: list[str] = []
        last = -1
        for i, (tok, par) in enumerate(zip(self.tokens, self.parents, strict=True)):
            if par == last:
                tokens.append(tok)
                sources.append(self.source_at(i))
                last = i
        path = DraftTree.sequence(tokens, self.source)
        if self.node_sources is not None:
            path.node_sources = sources
        return path

    def layout(self) -> TreeLayout:
        if self._layout is None:
            self._layout = TreeLayout(self.tokens, self.parents)
        return self._layout

    def truncated(self, max_nodes: int) -> DraftTree:
        """The first max_nodes nodes (still a tree: parents come before children)."""
        if max_nodes >= len(self.tokens):
            return self
        sources = self.node_sources[:max_nodes] if self.node_sources is not None else None
        return DraftTree(self.tokens[:max_nodes], self.parents[:max_nodes], self.source, sources)
