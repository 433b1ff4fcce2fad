"""Suffix-automaton drafters: the conversation so far (dynamic) and the static index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from samchat.decoding.prompt import common_prefix
from samchat.decoding.protocols import Drafter, DraftIndex
from samchat.decoding.tree import DraftTree
from samchat.names import DYNAMIC_SAM, STATIC_SAM
from samchat.sam import MatchCursor, SuffixAutomaton


class DynamicSamDrafter(Drafter):
    """A suffix automaton over the whole conversation (system prompt, every turn, tokens as they
    are committed). Each token is matched first, then appended, so a match always points to
    earlier text; the draft is what followed that earlier occurrence.

    An edit, a branch or a re-tokenised reply changes the conversation's past, which an
    automaton cannot forget: the old text stays (drafts from it are as good as any other text's)
    and only the cursor restarts, until the automaton outgrows the conversation by REBUILD_SLACK
    tokens and is rebuilt."""

    name = DYNAMIC_SAM
    REBUILD_SLACK = 1024
    REFEED = 64  # tokens before the change the restarted cursor is fed, to match again at once

    def __init__(self) -> None:
        self._conv: list[int] = []  # the conversation the cursor stands at the end of
        self._size = 0  # tokens in the automaton
        self._sam = SuffixAutomaton()
        self._cursor = MatchCursor(self._sam)

    @property
    def text_tokens(self) -> int:
        return self._size

    def _push(self, tokens: Sequence[int]) -> None:
        feed = self._cursor.feed
        extend = self._sam.extend
        for t in tokens:
            feed(t)
            extend(t)
        self._conv.extend(tokens)
        self._size += len(tokens)

    def begin(self, context: Sequence[int]) -> None:
        conv = self._conv
        k = common_prefix(conv, context)
        if k < len(conv):
            if self._size + len(context) - k > 2 * len(context) + self.REBUILD_SLACK:
                self._sam = SuffixAutomaton()
                self._size = 0
                k = 0
            self._cursor = MatchCursor(self._sam)
            for t in context[max(0, k - self.REFEED) : k]:
                self._cursor.feed(t)
            del conv[k:]
        self._push(context[k:])

    def match_len(self) -> int:
        return int(self._cursor.match_len)

    def propose(self, max_nodes: int) -> DraftTree | None:
        toks = self._cursor.draft(max_nodes)
        return DraftTree.sequence(toks, self.name) if toks else None

    def advance(self, tokens: Sequence[int]) -> None:
        self._push(tokens)


class StaticSamDrafter(Drafter):
    """Drafts from the static index (past chats, imported documents): sequences, or trees of
    the most frequent continuations when tree_topk > 0."""

    name = STATIC_SAM

    def __init__(self, index: DraftIndex, context: int = 256, tree_topk: int = 0) -> None:
        self._index = index
        self._context = context
        self._topk = tree_topk
        self._cursor: Any = None

    def begin(self, context: Sequence[int]) -> None:
        # A fresh cursor per reply sees documents added since the last one.
        self._cursor = self._index.cursor()
        self._cursor.feed_many(list(context[-self._context :]))

    def match_len(self) -> int:
        return int(self._cursor.match_len) if self._cursor is not None else 0

    def propose(self, max_nodes: int) -> DraftTree | None:
        if self._cursor is None:
            return None
        if self._topk > 0:
            toks, parents = self._cursor.draft_tree(max_nodes, max_nodes, self._topk)
            return DraftTree(list(toks), list(parents), self.name) if toks else None
        seq = self._cursor.draft(max_nodes)
        return DraftTree.sequence(list(seq), self.name) if seq else None

    def advance(self, tokens: Sequence[int]) -> None:
        if self._cursor is not None:
            self._cursor.feed_many(list(tokens))
