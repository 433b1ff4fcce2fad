"""The engine's KV cache as the tokens it holds: the longest common prefix kept, the rest of a
prompt read in pieces (with progress, and stopped by a cancel, midway where the engine can),
and the inputs a verification accepted committed. ChatSession reads every prompt through it."""

from __future__ import annotations

import threading
from collections.abc import Generator

import numpy as np

from samchat.decoding.events import PrefillProgress
from samchat.decoding.prompt import common_prefix
from samchat.engines import Engine, Logits
from samchat.engines.base import ReadStopped


class PromptReader:
    """Keeps `tokens` equal to what the engine's cache holds, in order."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.tokens: list[int] = []
        # The logits of the last prompt rows read, (ids, rows), for Token Recycling.
        self.prompt_rows: tuple[list[int], Logits] | None = None

    def reset(self) -> None:
        self.engine.reset()
        self.tokens = []

    def restore(self) -> None:
        """After a failed forward the layers may hold different row counts: cut them back."""
        try:
            self.engine.crop(len(self.tokens))
            if self.engine.length != len(self.tokens):
                raise RuntimeError("cache length mismatch")
        except Exception:
            self.reset()

    def commit(self, start: int, keep: list[int], ids: list[int]) -> None:
        """After a forward of `ids` at `start` cached tokens: keep inputs `keep` (0 first)."""
        self.engine.commit(start, keep)
        self.tokens.extend(ids[j] for j in keep)

    def keep_prefix(self, prompt: list[int]) -> int:
        """Cut the cache back to its longest common prefix with prompt[:-1]: what is reused."""
        keep = min(common_prefix(self.tokens, prompt), len(prompt) - 1)
        self.prompt_rows = None
        try:
            self.engine.crop(keep)
            self.engine.plan_read(keep, len(prompt) - 1 - keep)
            # This memory cannot drop a suffix, or the engine laid it out anew: start over.
            if self.engine.length != keep:
                self.engine.reset()
                keep = 0
            del self.tokens[keep:]
        except BaseException:  # a Ctrl-C too: the cache restored, then re-raised
            self.restore()
            raise
        return keep

    def prefill(self, prompt: list[int], logit_rows: int = 0) -> int:
        """Make the cache hold prompt[:-1]; returns how many tokens were reused. With
        logit_rows, the logits of up to that many of the last new rows are kept in
        `prompt_rows`."""
        keep = self.keep_prefix(prompt)
        for _ in self._pieces(prompt, logit_rows):
            pass
        return keep

    def read(
        self, prompt: list[int], logit_rows: int, cancel: threading.Event | None
    ) -> Generator[PrefillProgress, None, bool]:
        """Read prompt[:-1] past the kept prefix, yielding PrefillProgress where it takes
        several pieces; returns True when `cancel` stopped it (the pieces read stay)."""
        total = len(prompt) - 1 - len(self.tokens)
        shown = total > self.engine.prefill_chunk  # several pieces: progress is worth it
        stopped = False
        reading = self._pieces(prompt, logit_rows)
        watch = _StopReading(self.engine, cancel) if total > 0 and cancel is not None else None
        try:
            if shown:
                yield PrefillProgress(0, total)
            # Checked before each piece: a cancel seen after a progress event reads no more;
            # one that comes during a piece stops it midway where the engine can.
            while not (stopped := cancel is not None and cancel.is_set()):
                try:
                    done = next(reading, None)
                except ReadStopped:
                    if cancel is not None and cancel.is_set():
                        stopped = True
                        break
                    # A stop meant for an earlier reply: the whole pieces stay, read on.
                    reading = self._pieces(prompt, logit_rows)
                    continue
                if done is None:
                    break
                if shown:
                    yield PrefillProgress(done, total)
        finally:
            if watch is not None:
                watch.close()
            reading.close()  # a cancelled read keeps the pieces read
        return stopped

    def _pieces(self, prompt: list[int], logit_rows: int) -> Generator[int, None, None]:
        """Read prompt[:-1] past what the cache holds, one engine piece at a time, yielding
        the new tokens read so far after each; the logits of the last `logit_rows` new rows,
        whichever pieces they fall in, go to `prompt_rows`. Closed early (a cancelled reply),
        the cache holds the pieces read."""
        start = len(self.tokens)
        rest = prompt[start:-1]
        piece = max(1, self.engine.prefill_chunk)
        first_row = len(rest) - min(max(logit_rows, 0), len(rest))  # the first row kept
        kept: list[tuple[list[int], Logits]] = []
        try:
            for i in range(0, len(rest), piece):
                chunk = rest[i : i + piece]
                rows = max(0, i + len(chunk) - max(i, first_row))
                logits = self.engine.prefill(chunk, rows)
                if logits is not None:
                    got = int(logits.shape[0])
                    if got < rows:  # an engine may give fewer rows: keep a contiguous run
                        kept.clear()
                    kept.append((chunk[len(chunk) - got :], logits))
                self.tokens.extend(chunk)
                yield i + len(chunk)
        except BaseException:  # a Ctrl-C too: the cache restored, then re-raised
            self.restore()
            raise
        if kept:
            ids = [t for part, _ in kept for t in part]
            rows_read = kept[0][1] if len(kept) == 1 else np.concatenate([r for _, r in kept])
            self.prompt_rows = (ids, rows_read)


class _StopReading:
    """While a long prompt is read: a cancel stops the piece in progress (Engine.stop_reading),
    not only the next one, so a stop never waits for a whole piece."""

    POLL_S = 0.02

    def __init__(self, engine: Engine, cancel: threading.Event) -> None:
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(engine, cancel), name="samchat-stop-reading", daemon=True
        )
        self._thread.start()

    def _run(self, engine: Engine, cancel: threading.Event) -> None:
        while not self._done.is_set():
            if cancel.wait(self.POLL_S):
                if not self._done.is_set():
                    engine.stop_reading()
                return

    def close(self) -> None:
        """It ends by itself within POLL_S; not waited for, so no reply starts later for it (a
        stop that comes after the read is harmless: each read clears the engine's flag)."""
        self._done.set()
