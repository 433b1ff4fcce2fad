"""ChatSession: one conversation with a model. It keeps the KV cache across calls, so a new turn
(or an edit, a branch, a regeneration) prefills only the tokens after the longest common prefix,
and it streams each reply with speculative decoding (or plain decoding) as events."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import numpy as np

from samchat.decoding.context_fit import drop_oldest_turn, dropped_notice
from samchat.decoding.drafter import Drafter
from samchat.decoding.events import Event, PrefillProgress, StepStats
from samchat.decoding.params import DecodingConfig, SamplingParams
from samchat.decoding.policy import PLAIN, AcceptanceModel, Decision, Drafting, begin_reply
from samchat.decoding.prompt import common_prefix, render_prompt
from samchat.decoding.protocols import DraftIndex, SessionModel
from samchat.decoding.reply import Reply
from samchat.decoding.sampling import Sampler
from samchat.decoding.tree import DraftTree
from samchat.engines import Engine, Logits, open_engine
from samchat.engines.base import ReadStopped
from samchat.engines.costs import CostCurve, CostTracker
from samchat.errors import SamchatError
from samchat.messages import Message

log = logging.getLogger(__name__)


class ChatSession:
    """Holds the KV cache of one conversation; generate() streams one reply."""

    def __init__(
        self,
        lm: SessionModel,
        config: DecodingConfig | None = None,
        static_index: DraftIndex | None = None,
        cost_curve: CostCurve | None = None,
        cache_dir: Path | None = None,
        measure_first: bool = True,
    ) -> None:
        """cache_dir: where what is measured on this machine (cost curves and kernels, the
        Token Recycling table) is kept across sessions; None keeps it in this process only.
        measure_first=False: while this machine's cost curve is unknown, replies decode plainly
        (no drafts, nothing measured) until the front end calls measure_cost_curve()."""
        self.lm = lm
        self.cache_dir = cache_dir
        self.config = config or DecodingConfig()
        self.config.validate()
        self._tok = lm.tokenizer
        self._engine: Engine = open_engine(lm, cache_dir)
        self._eos = frozenset(int(i) for i in lm.eos_ids)
        self._cached: list[int] = []  # the tokens whose keys/values the cache holds, in order
        self.context_limit = int(lm.context_limit)
        # Why drafting is limited on this model (None = trees and sequences both work).
        self.tree_reason: str | None = self._engine.tree_reason
        self.plain_reason: str | None = self._engine.plain_reason
        for reason in (self.plain_reason, self.tree_reason):
            if reason:
                log.info("%s: %s", getattr(lm, "name", "model"), reason)
        self._acceptance = AcceptanceModel()
        self._curve = cost_curve
        self.measure_first = measure_first
        self.curve_missing = False  # a reply ran plainly because the curve is not measured yet
        self._tracker: CostTracker | None = None
        self._since_plain = 0  # steps since the last plain one
        self._told_inexact = False
        self.prompt_rows: tuple[list[int], Logits] | None = None
        self._static_index = static_index
        self._dyn: Drafter | None = None
        self._static: Drafter | None = None
        self.aux_drafter: Drafter | None = None  # Token Recycling plugs in here
        self._aux_tried = False

    # -- public knobs -------------------------------------------------------------------------

    @property
    def static_index(self) -> DraftIndex | None:
        return self._static_index

    @static_index.setter
    def static_index(self, index: DraftIndex | None) -> None:
        """The static index may be opened after the model; set (or clear) it any time."""
        self._static_index = index
        self._static = None

    @property
    def cached_tokens(self) -> int:
        return len(self._cached)

    @property
    def engine(self) -> Engine:
        return self._engine

    def reset(self) -> None:
        """Forget the KV cache (the next call prefills everything)."""
        self._engine.reset()
        self._cached = []

    # -- prompt -------------------------------------------------------------------------------

    def render(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat template for messages, with the assistant prompt appended."""
        return render_prompt(self._tok, messages)

    def _fit(self, messages: list[Message], params: SamplingParams) -> tuple[list[int], str]:
        """Render, dropping the oldest non-system turns while the prompt leaves too little room."""
        if not messages:
            raise SamchatError("no messages to reply to")
        for m in messages:
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise SamchatError("each message needs a role and a content")
        msgs = list(messages)
        ids = self.render(msgs)
        reserve = min(self.config.reserve_tokens, params.max_new_tokens)
        dropped = 0
        while len(ids) + reserve > self.context_limit:
            gone = drop_oldest_turn(msgs)
            if not gone:
                raise SamchatError(
                    f"the message is too long for the model's context ({len(ids)} tokens, "
                    f"limit {self.context_limit} incl. {reserve} for the reply); shorten it"
                )
            dropped += gone
            ids = self.render(msgs)
        return ids, dropped_notice(dropped)

    # -- model calls --------------------------------------------------------------------------

    def _restore(self) -> None:
        """After a failed forward the layers may hold different row counts: cut them back."""
        try:
            self._engine.crop(len(self._cached))
            if self._engine.length != len(self._cached):
                raise RuntimeError("cache length mismatch")
        except Exception:
            self.reset()

    def prefill_tokens(self, prompt: list[int], logit_rows: int = 0) -> int:
        """Make the cache hold prompt[:-1]; returns how many tokens were reused. With
        logit_rows, the logits of up to that many of the last new rows are kept in
        `prompt_rows` (ids, logits) for Token Recycling."""
        keep = self._keep_prefix(prompt)
        for _ in self._read(prompt, logit_rows):
            pass
        return keep

    def _keep_prefix(self, prompt: list[int]) -> int:
        """Cut the cache back to its longest common prefix with prompt[:-1]: what is reused."""
        keep = min(common_prefix(self._cached, prompt), len(prompt) - 1)
        self.prompt_rows = None
        try:
            self._engine.crop(keep)
            self._engine.plan_read(keep, len(prompt) - 1 - keep)
            # This memory cannot drop a suffix, or the engine laid it out anew: start over.
            if self._engine.length != keep:
                self._engine.reset()
                keep = 0
            del self._cached[keep:]
        except BaseException:  # a Ctrl-C too: the cache restored, then re-raised
            self._restore()
            raise
        return keep

    def _read(self, prompt: list[int], logit_rows: int) -> Generator[int, None, None]:
        """Read prompt[:-1] past what the cache holds, one engine piece at a time, yielding
        the new tokens read so far after each; the logits of the last `logit_rows` new rows,
        whichever pieces they fall in, go to `prompt_rows`. Closed early (a cancelled reply),
        the cache holds the pieces read."""
        start = len(self._cached)
        rest = prompt[start:-1]
        piece = max(1, self._engine.prefill_chunk)
        first_row = len(rest) - min(max(logit_rows, 0), len(rest))  # the first row kept
        kept: list[tuple[list[int], Logits]] = []
        try:
            for i in range(0, len(rest), piece):
                chunk = rest[i : i + piece]
                rows = max(0, i + len(chunk) - max(i, first_row))
                logits = self._engine.prefill(chunk, rows)
                if logits is not None:
                    got = int(logits.shape[0])
                    if got < rows:  # an engine may give fewer rows: keep a contiguous run
                        kept.clear()
                    kept.append((chunk[len(chunk) - got :], logits))
                self._cached.extend(chunk)
                yield i + len(chunk)
        except BaseException:  # a Ctrl-C too: the cache restored, then re-raised
            self._restore()
            raise
        if kept:
            ids = [t for part, _ in kept for t in part]
            rows_read = kept[0][1] if len(kept) == 1 else np.concatenate([r for _, r in kept])
            self.prompt_rows = (ids, rows_read)

    def prefill_logits(self, messages: list[Message]) -> Logits:
        """Logits the model gives after the rendered prompt, through the KV-reusing path
        (what the first reply token is chosen from). Leaves the cache holding the prompt."""
        prompt = self.render(messages)
        self.prefill_tokens(prompt)
        try:
            logits: Logits = self._engine.forward([prompt[-1]])[-1].copy()
        except BaseException:  # a Ctrl-C too: the cache restored, then re-raised
            self._restore()
            raise
        self._cached.append(prompt[-1])
        return logits

    def _curve_for_device(self) -> CostCurve:
        if self._curve is None:
            self._curve = self._engine.meter.cost_curve()
        return self._curve

    def _known_curve(self) -> CostCurve | None:
        """The cost curve, measured first unless measure_first is off (then None while it is
        not known: that reply runs plainly)."""
        if self._curve is None and not self.measure_first:
            self._curve = self._engine.meter.cached_cost_curve()
            self.curve_missing = self._curve is None
            return self._curve
        return self._curve_for_device()

    def measure_cost_curve(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Measure this machine's verification costs now (once per model and machine, then
        cached): what sizes drafts. Call it when nothing else runs, since it times the CPU.
        `cancelled()` true stops it (MeasurementCancelled; nothing is kept)."""
        if self._curve is None:
            self._curve = self._engine.meter.cost_curve(cancelled)
        self._engine.meter.fit()
        self.curve_missing = False

    def _calibrate(self, pending: int) -> float:
        """Time one single-token forward (then drop its row): the plain-decoding step cost."""
        t0 = time.perf_counter()
        try:
            self._engine.forward([pending])
            return time.perf_counter() - t0
        finally:
            self._restore()

    # -- drafters -----------------------------------------------------------------------------

    def _drafters(self) -> tuple[Drafter | None, Drafter | None, Drafter | None]:
        cfg = self.config
        if cfg.method == "plain" or self.plain_reason:
            return None, None, None
        dyn = static = aux = None
        if cfg.uses_sam:
            if self._dyn is None:
                self._dyn = _make_dynamic()
            dyn = self._dyn
            if self._static is None and self._static_index is not None:
                self._static = _make_static(self._static_index, cfg)
            static = self._static
        if cfg.uses_tr:
            if self.aux_drafter is None and not self._aux_tried:
                self._aux_tried = True
                self.aux_drafter = _make_recycling(self.lm, self.cache_dir)
            aux = self.aux_drafter
        return dyn, static, aux

    # -- the decoding loop --------------------------------------------------------------------

    def verify_step(
        self, pending: int, tree: DraftTree | None, sampler: Sampler
    ) -> tuple[list[int], list[int], int, Logits]:
        """One forward over [pending] + draft; commits pending and the accepted path to the
        cache. Returns (input ids, accepted input indices, bonus token, logits)."""
        n_cached = len(self._cached)
        layout = None
        if tree is None:
            ids = [pending]
        else:
            ids = [pending, *tree.tokens]
            if not tree.is_sequence:
                layout = tree.layout()
        logits = self._engine.forward(ids, layout)
        choose: Callable[[int], int]
        if sampler.greedy:  # only the rows the walk visits

            def choose(j: int) -> int:
                return int(logits[j].argmax())
        else:

            def choose(j: int) -> int:
                return sampler.choose(logits[j])

        if tree is None:
            path: list[int] = []
            bonus = choose(0)
        elif layout is None:  # a sequence: accept while the model agrees
            toks = tree.tokens
            m = len(toks)
            j = 0
            while True:
                t = choose(j)
                if j < m and t == toks[j]:
                    j += 1
                    continue
                bonus = t
                break
            path = list(range(1, j + 1))
        else:
            path, bonus = layout.walk(choose)
        self._engine.commit(n_cached, [0, *path])
        self._cached.append(pending)
        self._cached.extend(ids[j] for j in path)
        return ids, path, bonus, logits

    def generate(
        self,
        messages: list[Message],
        params: SamplingParams | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream the reply to `messages` (ending with a user turn): PrefillProgress while a
        long prompt is read, then TextDelta and StepStats events, then one ReplyDone. `cancel`
        set ends it, also while the prompt is read."""
        params = params or SamplingParams()
        params.validate()
        t_start = time.perf_counter()
        prompt, notice, drafting = self._plan_reply(messages, params)
        reused = self._keep_prefix(prompt)
        total = len(prompt) - 1 - reused
        shown = total > self._engine.prefill_chunk  # several pieces: progress is worth it
        stopped = False
        logit_rows = self._prompt_logit_rows(drafting)
        reading = self._read(prompt, logit_rows)
        watch = _StopReading(self._engine, cancel) if total > 0 and cancel is not None else None
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
                    reading = self._read(prompt, logit_rows)
                    continue
                if done is None:
                    break
                if shown:
                    yield PrefillProgress(done, total)
        finally:
            if watch is not None:
                watch.close()
            reading.close()  # a cancelled read keeps the pieces read
        if stopped:
            drafting = None
        elif drafting is not None:
            drafting.begin(prompt, self.prompt_rows)
        reply = self._new_reply(prompt, params, reused, notice, t_start)
        # Invariant: the cache holds every committed token but reply.pending.
        while reply.finish is None:
            budget = reply.budget(cancel, self.context_limit)
            if budget is None:  # cancelled, or the context is full
                break
            step = self._step(reply, drafting, budget)
            if step is None:  # the model rejected a tree mask: step again without a tree
                continue
            stats, new, sources = step
            yield stats
            delta = reply.commit(new, sources)
            if delta is not None:
                yield delta
        yield from self._end_reply(reply, drafting)

    def _plan_reply(
        self, messages: list[Message], params: SamplingParams
    ) -> tuple[list[int], str, Drafting | None]:
        """Fit the prompt, and plan this reply's drafters."""
        self._engine.meter.fit(measure=self.measure_first)
        prompt, notice = self._fit(messages, params)
        inexact = self._engine.inexact_reason
        if inexact and not self._told_inexact and self.config.method != "plain":
            self._told_inexact = True  # once per session: every reply would be noise
            notice = f"{notice}; {inexact}" if notice else inexact
        begin_reply(self._acceptance)
        return prompt, notice, self._plan_drafting(len(prompt))

    def _new_reply(
        self, prompt: list[int], params: SamplingParams, reused: int, notice: str, t_start: float
    ) -> Reply:
        # Setup (drafters, a first cost-curve measurement) counts as prefill, not decoding.
        return Reply(
            self._tok,
            params,
            Sampler(params),
            prompt,
            self._eos,
            reused=reused,
            notice=notice,
            method=self.config.method,
            t_start=t_start,
            t_decode=time.perf_counter(),
        )

    def _prompt_logit_rows(self, drafting: Drafting | None) -> int:
        """How many new prompt rows Token Recycling learns from (their logits cost an output
        projection each: where verification is not nearly free, only the last ones, where the
        reply most likely copies from)."""
        return 0 if drafting is None else drafting.prompt_logit_rows(int(self.lm.vocab_size))

    def _plan_drafting(self, context: int) -> Drafting | None:
        """This reply's drafters and selector, priced on the cost curve after `context` cached
        tokens (the policy's Drafting.plan)."""
        drafters = self._drafters()
        if all(d is None for d in drafters):
            return None
        known = self._known_curve()
        if known is None:  # not measured yet: plain decoding is exact and needs no prices
            return None
        curve = known.at(context)
        if self._tracker is None:
            self._tracker = CostTracker(curve)
        tracker = self._tracker
        tracker.rebase(curve)
        trees = self.tree_reason is None
        exact = self._engine.exact_rows
        return Drafting.plan(self.config, tracker, self._acceptance, drafters, trees, exact)

    def _step(
        self, reply: Reply, drafting: Drafting | None, budget: int
    ) -> tuple[StepStats, list[int], list[str]] | None:
        """Choose a draft, verify it in one forward, learn from the outcome. Returns the step's
        stats, the accepted tokens (bonus included) and their drafters; None when the model
        rejected a tree mask (tree drafts are off from then on)."""
        tree: DraftTree | None = None
        decision: Decision = PLAIN
        if drafting is not None:
            tree, decision = drafting.choose(budget, self._engine.exact_rows, self._since_plain)
        t0 = time.perf_counter()
        try:
            ids, path, bonus, logits = self.verify_step(reply.pending, tree, reply.sampler)
        except BaseException as exc:  # a Ctrl-C is re-raised below, the cache restored
            self._restore()
            if not isinstance(exc, Exception) or tree is None or tree.is_sequence:
                raise
            # The model rejected the 4D tree mask: sequence drafts from now on.
            self.tree_reason = f"tree verification failed ({type(exc).__name__}: {exc})"
            log.warning("tree drafts disabled: %s", self.tree_reason)
            if drafting is not None:
                drafting.trees_failed()
            return None
        forward_s = time.perf_counter() - t0
        reply.stepped(bonus, forward_s, plain=tree is None)
        self._since_plain = 0 if tree is None else self._since_plain + 1
        n_acc = len(path)
        new = [ids[j] for j in path]
        new.append(bonus)
        sources = [tree.source_at(j - 1) for j in path] if tree is not None else []
        if drafting is not None:
            drafting.learn(decision, ids, logits, new, sources, forward_s)
        sources.append("plain")
        size = len(tree) if tree is not None else 0
        return StepStats(decision.drafter, size, n_acc, forward_s), new, sources

    def _end_reply(self, reply: Reply, drafting: Drafting | None) -> Iterator[Event]:
        if drafting is not None:
            drafting.finish()
        tail = reply.close()
        if tail is not None:
            yield tail
        seconds = time.perf_counter() - reply.t_decode
        # The speedup estimate prices the reply's tokens at a one-token forward timed under the
        # same load: this reply's plain steps, else one forward now (after `seconds`: no
        # decoding). Another reply's timing would compare different loads.
        t1 = 0.0
        if reply.n_plain:
            t1 = reply.forward_plain / reply.n_plain
        elif reply.finish != "cancelled":
            t1 = self._calibrate(reply.pending)
        yield reply.done(seconds, t1)


def _make_dynamic() -> Drafter | None:
    try:
        from samchat.decoding.sam_drafters import DynamicSamDrafter
    except ImportError as exc:
        log.warning("dynamic SAM drafter unavailable: %s", exc)
        return None
    return DynamicSamDrafter()


def _make_static(index: DraftIndex, config: DecodingConfig) -> Drafter | None:
    try:
        from samchat.decoding.sam_drafters import StaticSamDrafter
    except ImportError as exc:
        log.warning("static SAM drafter unavailable: %s", exc)
        return None
    return StaticSamDrafter(index, context=config.static_context, tree_topk=config.static_tree_topk)


def _make_recycling(lm: SessionModel, cache_dir: Path | None) -> Drafter | None:
    from samchat.decoding.recycling import TokenRecyclingDrafter

    return TokenRecyclingDrafter.for_model(lm, cache_dir)


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
