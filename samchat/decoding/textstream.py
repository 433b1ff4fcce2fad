"""Streaming detokenisation that never splits a multi-byte character, plus stop strings."""

from __future__ import annotations

import weakref

from samchat.tokenizer import Tokenizer

# Each tokenizer's text of single tokens: a push decodes the window before the new tokens,
# after a plain step one token, so half its decodes are a look-up (a decode crosses into the
# tokenizer's library: the longest part of committing a token).
_SINGLE: weakref.WeakKeyDictionary[Tokenizer, dict[int, str]] = weakref.WeakKeyDictionary()


def _singles(tokenizer: Tokenizer) -> dict[int, str]:
    try:
        return _SINGLE.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that takes no weak reference: its own dict, unshared
        return {}


class IncrementalDetokenizer:
    """Decodes a growing token list into text deltas.

    Decoding token by token breaks characters spread over several byte-level tokens, so each
    delta is the difference between decoding a short window of recent tokens with and without
    the new ones; a trailing U+FFFD (an unfinished character) waits for more tokens.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._tok = tokenizer
        self._single = _singles(tokenizer)
        self.ids: list[int] = []
        self._prefix = 0  # start of the window re-decoded for context
        self._read = 0  # tokens before this are already in `text`
        self.text = ""

    def _decode(self, ids: list[int]) -> str:
        if len(ids) == 1:
            single = self._single.get(ids[0])
            if single is None:
                single = self._single[ids[0]] = self._tok.decode(ids, skip_special_tokens=True)
            return single
        text: str = self._tok.decode(ids, skip_special_tokens=True)
        return text

    def push(self, new_ids: list[int]) -> str:
        self.ids.extend(new_ids)
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        full = self._decode(self.ids[self._prefix :])
        if len(full) > len(prefix_text) and not full.endswith("\ufffd"):
            delta = full[len(prefix_text) :]
            self._prefix = self._read
            self._read = len(self.ids)
            self.text += delta
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an unfinished character at the very end)."""
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        full = self._decode(self.ids[self._prefix :])
        delta = full[len(prefix_text) :]
        self._prefix = self._read = len(self.ids)
        self.text += delta
        return delta


class StopMatcher:
    """Finds stop strings in the streamed text and holds back text that may start one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._longest = max((len(s) for s in self.stops), default=0)

    def __bool__(self) -> bool:
        return bool(self.stops)

    def find(self, text: str, searched_upto: int) -> int:
        """Index of the earliest stop string in text (only text after searched_upto - longest
        + 1 can hold a new one), or -1."""
        start = max(0, searched_upto - self._longest + 1)
        best = -1
        for s in self.stops:
            i = text.find(s, start)
            if i != -1 and (best == -1 or i < best):
                best = i
        return best

    def safe_len(self, text: str) -> int:
        """Length of the prefix of text that cannot be the start of a stop string."""
        for k in range(min(self._longest - 1, len(text)), 0, -1):
            tail = text[-k:]
            if any(s.startswith(tail) for s in self.stops):
                return len(text) - k
        return len(text)
