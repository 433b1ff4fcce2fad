"""Which drafter produced each character of a reply, as runs of (characters, drafter).

The engine knows the drafter of every committed token; it records how many characters each
token added to the detokenised text (a token that completes a multi-byte character gets the
whole character), so the front ends only render and store what it reports.
"""

from __future__ import annotations

import bisect

from samchat.decoding.textstream import IncrementalDetokenizer

Run = tuple[int, str]  # (characters, drafter): "dyn" | "static" | "tr" | "plain"


class Provenance:
    """Runs over a growing text, adjacent runs of one drafter merged."""

    def __init__(self) -> None:
        self._starts: list[int] = []  # where each run starts: runs() bisects, not walks
        self._sizes: list[int] = []
        self._sources: list[str] = []
        self.length = 0

    def add(self, chars: int, source: str) -> None:
        if chars <= 0:
            return
        if self._sources and self._sources[-1] == source:
            self._sizes[-1] += chars
        else:
            self._starts.append(self.length)
            self._sizes.append(chars)
            self._sources.append(source)
        self.length += chars

    def runs(self, start: int = 0, end: int | None = None) -> list[Run]:
        """The runs clipped to text[start:end] (each delta asks for its own short range)."""
        stop = self.length if end is None else min(end, self.length)
        out: list[Run] = []
        i = max(bisect.bisect_right(self._starts, start) - 1, 0)
        while i < len(self._starts) and self._starts[i] < stop:
            a = max(self._starts[i], start)
            b = min(self._starts[i] + self._sizes[i], stop)
            if a < b:
                out.append((b - a, self._sources[i]))
            i += 1
        return out


def pieces(text: str, runs: list[Run]) -> tuple[tuple[str, str], ...]:
    """text (whose length the runs cover) cut into (piece, drafter)."""
    out: list[tuple[str, str]] = []
    pos = 0
    for n, source in runs:
        out.append((text[pos : pos + n], source))
        pos += n
    return tuple(out)


class AttributedText:
    """Detokenises token by token, crediting each new character to the drafter of the token
    that completed it (a character spread over several byte-level tokens goes, whole, with
    the last of them)."""

    def __init__(self, detok: IncrementalDetokenizer) -> None:
        self.detok = detok
        self.provenance = Provenance()
        self.last_source = "plain"

    @property
    def text(self) -> str:
        return self.detok.text

    def push(self, token: int, source: str) -> None:
        before = len(self.detok.text)
        self.detok.push([token])
        self.provenance.add(len(self.detok.text) - before, source)
        self.last_source = source

    def flush(self) -> None:
        """Release a held-back unfinished character (credited to the last token's drafter)."""
        before = len(self.detok.text)
        self.detok.flush()
        self.provenance.add(len(self.detok.text) - before, self.last_source)

    def pieces(self, start: int, end: int) -> tuple[tuple[str, str], ...]:
        return pieces(self.detok.text[start:end], self.provenance.runs(start, end))
