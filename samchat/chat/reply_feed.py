"""What a reply's worker thread has produced since the front end last looked.

The decoding thread only appends under a lock (no message, no wake-up per token), and the
front end takes everything once per frame: a fast reply costs the UI a fixed number of updates
a second, however many tokens it commits, and leaves the cores to the engine."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass
class FeedBatch:
    """Everything added since the last take, in order."""

    text: str = ""
    pieces: list[tuple[str, str]] = field(default_factory=list)  # (text, drafter) runs
    deltas: list[tuple[int, list[str], float]] = field(default_factory=list)  # tokens, drafters, t
    # forward seconds, plain, when the step ended
    steps: list[tuple[float, bool, float]] = field(default_factory=list)


class ReplyFeed:
    """Filled by one decoding thread, emptied by the front end's thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._text: list[str] = []
        self._batch = FeedBatch()

    def add_text(
        self, text: str, pieces: list[tuple[str, str]], tokens: int, sources: list[str], t: float
    ) -> None:
        """A TextDelta: its text, drafter runs, tokens and their drafters, when it came."""
        with self._lock:
            self._text.append(text)
            self._batch.pieces.extend(pieces)
            self._batch.deltas.append((tokens, sources, t))

    def add_step(self, forward_s: float, plain: bool, t: float) -> None:
        """A StepStats: its forward's seconds, whether it was plain, when it ended."""
        with self._lock:
            self._batch.steps.append((forward_s, plain, t))

    def take(self) -> FeedBatch | None:
        """What came since the last take (None: nothing)."""
        with self._lock:
            batch = self._batch
            if not (self._text or batch.deltas or batch.steps):
                return None
            batch.text = "".join(self._text)
            self._text = []
            self._batch = FeedBatch()
        return batch
