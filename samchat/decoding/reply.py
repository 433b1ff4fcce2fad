"""One reply as ChatSession.generate commits it: the text with the drafter of each character,
the counters ReplyStats reports and why the reply ended."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from samchat.decoding.events import ReplyDone, ReplyStats, TextDelta
from samchat.decoding.params import SamplingParams
from samchat.decoding.provenance import AttributedText
from samchat.decoding.textstream import IncrementalDetokenizer, StopMatcher
from samchat.tokenizer import Tokenizer

if TYPE_CHECKING:
    import threading

    from samchat.decoding.sampling import Sampler
    from samchat.names import FinishReason


class Reply:
    """State of the reply being decoded. `finish` stays None while it goes on; `pending` is
    the last committed token, the one the KV cache does not hold yet."""

    # Slots: the step loop reads these attributes on every step.
    __slots__ = (
        "accepted_by",
        "committed",
        "detok",
        "emitted",
        "eos",
        "finish",
        "forward_plain",
        "method",
        "n_plain",
        "notice",
        "out",
        "params",
        "pending",
        "produced",
        "prompt_tokens",
        "reused",
        "sampler",
        "searched",
        "steps",
        "stop_at",
        "stopper",
        "t_decode",
        "t_start",
        "ttft",
    )

    def __init__(
        self,
        tokenizer: Tokenizer,
        params: SamplingParams,
        sampler: Sampler,
        prompt: list[int],
        eos: frozenset[int],
        *,
        reused: int,
        notice: str,
        method: str,
        t_start: float,
        t_decode: float,
    ) -> None:
        self.params = params
        self.sampler = sampler
        self.eos = eos
        self.prompt_tokens = len(prompt)
        self.reused = reused
        self.notice = notice
        self.method = method
        self.t_start = t_start  # the generate() call, for ttft
        self.t_decode = t_decode  # end of prefill and drafter setup
        self.detok = IncrementalDetokenizer(tokenizer)
        self.stopper = StopMatcher(params.stop)
        self.out = AttributedText(self.detok)  # who drafted each character of detok.text
        self.pending = prompt[-1]
        self.produced = 0  # reply tokens (EOS excluded)
        self.committed = 0  # tokens committed by verification steps (EOS included), for MAT
        self.steps = 0
        self.forward_plain = 0.0  # forward time of the plain steps: the one-token time
        self.n_plain = 0
        self.emitted = 0  # characters of detok.text already sent
        self.searched = 0  # characters of detok.text already searched for stop strings
        self.stop_at = -1  # where the stop string starts (finish "stop")
        self.accepted_by: dict[str, int] = {}
        self.ttft = 0.0
        self.finish: FinishReason | None = None

    def budget(self, cancel: threading.Event | None, context_limit: int) -> int | None:
        """Draft nodes the next step may verify, or None (finish set) when the reply ends
        before it: cancelled, or no room left in the context."""
        if cancel is not None and cancel.is_set():
            self.finish = "cancelled"
            return None
        room = context_limit - self.prompt_tokens - self.produced  # tokens that still fit
        if room <= 0:
            self.finish = "context"
            return None
        return min(self.params.max_new_tokens - self.produced - 1, room - 1)

    def stepped(self, bonus: int, forward_s: float, plain: bool) -> None:
        """One verification forward done; bonus is the new pending token."""
        self.steps += 1
        if plain:
            self.forward_plain += forward_s
            self.n_plain += 1
        self.pending = bonus

    def commit(self, new: list[int], sources: list[str]) -> TextDelta | None:
        """Commit one step's tokens one by one exactly as plain decoding would have: EOS, the
        length limit or a stop string may end the reply inside them. Returns the text that is
        now safe to show (none while a possible stop string is held back)."""
        take = 0
        for t in new:
            self.committed += 1
            if t in self.eos:
                self.finish = "eos"
                break
            take += 1
            self.produced += 1
            if self.produced >= self.params.max_new_tokens:
                self.finish = "length"
                break
        toks = new[:take]
        srcs = sources[:take]
        out = self.out
        detok = self.detok
        stopper = self.stopper
        # Token by token, so each character is credited to the drafter of its token.
        for k, (t, src) in enumerate(zip(toks, srcs, strict=True)):
            out.push(t, src)
            if stopper:
                stop_at = stopper.find(detok.text, self.searched)
                self.searched = len(detok.text)
                if stop_at != -1:
                    self.stop_at = stop_at
                    self.finish = "stop"
                    toks, srcs = toks[: k + 1], srcs[: k + 1]
                    self.produced -= take - (k + 1)
                    break
        accepted_by = self.accepted_by
        for s in srcs:
            accepted_by[s] = accepted_by.get(s, 0) + 1
        finish = self.finish
        if finish is not None and finish != "stop":
            out.flush()
        text = detok.text
        if finish == "stop":
            end = self.stop_at
        elif stopper and finish is None:
            end = stopper.safe_len(text)
        else:
            end = len(text)
        emitted = self.emitted
        if not toks and end <= emitted:
            return None
        if self.ttft == 0.0:
            self.ttft = time.perf_counter() - self.t_start
        self.emitted = max(emitted, end)
        return TextDelta(text[emitted:end], toks, srcs, out.pieces(emitted, end))

    @property
    def text(self) -> str:
        """The reply text (the stop string and what follows it cut off)."""
        return self.detok.text[: self.stop_at] if self.finish == "stop" else self.detok.text

    def close(self) -> TextDelta | None:
        """The reply has ended: the text not sent yet, if any."""
        if self.finish in ("cancelled", "context"):
            self.out.flush()  # the unfinished character and any stop-string hold-back
        final = self.text
        if len(final) <= self.emitted:
            return None
        return TextDelta(final[self.emitted :], [], [], self.out.pieces(self.emitted, len(final)))

    def done(self, seconds: float, t1: float) -> ReplyDone:
        """The closing event; seconds of decoding, t1 the one-token forward time (0 = unknown)."""
        assert self.finish is not None  # generate() ends its loop only with a finish reason
        final = self.text
        produced, committed, steps = self.produced, self.committed, self.steps
        speedup = committed * t1 / seconds if seconds > 0 and t1 > 0 else 1.0
        stats = ReplyStats(
            tokens=produced,
            seconds=seconds,
            tokens_per_s=produced / seconds if seconds > 0 else 0.0,
            steps=steps,
            mat=committed / steps if steps else 0.0,
            accepted_by_drafter=self.accepted_by,
            speedup_est=speedup,
            prefill_s=self.t_decode - self.t_start,
            ttft_s=self.ttft,
            prompt_tokens=self.prompt_tokens,
            reused_tokens=self.reused,
            method=self.method,
            provenance=tuple(self.out.provenance.runs(0, len(final))),
        )
        return ReplyDone(final, self.finish, stats, self.notice)
