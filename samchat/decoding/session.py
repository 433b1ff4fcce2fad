"""ChatSession: one conversation with a model. It keeps the KV cache across calls, so a new turn
(or an edit, a branch, a regeneration) prefills only the tokens after the longest common prefix,
and it streams each reply with speculative decoding (or plain decoding) as events."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from samchat.decoding.context_fit import fit_rendered
from samchat.decoding.events import Event
from samchat.decoding.params import DecodingConfig, SamplingParams
from samchat.decoding.planning import ReplyPlanner
from samchat.decoding.policy import PLAIN, Decision, Drafting, begin_reply
from samchat.decoding.prompt import render_prompt
from samchat.decoding.protocols import Drafter, DraftIndex, SessionModel
from samchat.decoding.reading import PromptReader
from samchat.decoding.reply import Reply
from samchat.decoding.sampling import Sampler
from samchat.decoding.steptime import StepTimer
from samchat.decoding.tree import DraftTree
from samchat.decoding.verify import Verified, VerifyTimes, verify_step
from samchat.engines import Engine, Logits, open_engine
from samchat.engines.costs import CostCurve
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
        self._reader = PromptReader(self._engine)  # the tokens the KV cache holds
        self._eos = frozenset(int(i) for i in lm.eos_ids)
        self.context_limit = int(lm.context_limit)
        # Why drafting is limited on this model (None = trees and sequences both work).
        self.tree_reason: str | None = self._engine.tree_reason
        self.plain_reason: str | None = self._engine.plain_reason
        for reason in (self.plain_reason, self.tree_reason):
            if reason:
                log.info("%s: %s", getattr(lm, "name", "model"), reason)
        self.measure_first = measure_first
        self._planner = ReplyPlanner(
            lm, self.config, self._engine, cost_curve, cache_dir, measure_first
        )
        self._since_plain = 0  # steps since the last plain one
        self._told_inexact = False
        self._planner.static_index = static_index

    # -- public knobs -------------------------------------------------------------------------

    @property
    def static_index(self) -> DraftIndex | None:
        return self._planner.static_index

    @static_index.setter
    def static_index(self, index: DraftIndex | None) -> None:
        """The static index may be opened after the model; set (or clear) it any time."""
        self._planner.static_index = index
        self._planner.static = None

    @property
    def aux_drafter(self) -> Drafter | None:
        return self._planner.recycling

    @aux_drafter.setter
    def aux_drafter(self, drafter: Drafter | None) -> None:
        """Token Recycling plugs in here (a test's drafter too)."""
        self._planner.recycling = drafter

    @property
    def cached_tokens(self) -> int:
        return len(self._reader.tokens)

    @property
    def engine(self) -> Engine:
        return self._engine

    def reset(self) -> None:
        """Forget the KV cache (the next call prefills everything)."""
        self._reader.reset()

    # -- prompt -------------------------------------------------------------------------------

    def render(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat template for messages, with the assistant prompt appended."""
        return render_prompt(self._tok, messages)

    def _fit(self, messages: list[Message], params: SamplingParams) -> tuple[list[int], str]:
        """Render, dropping the oldest non-system turns while the prompt leaves too little room."""
        reserve = min(self.config.reserve_tokens, params.max_new_tokens)
        return fit_rendered(self.render, messages, reserve, self.context_limit)

    # -- model calls --------------------------------------------------------------------------

    @property
    def prompt_rows(self) -> tuple[list[int], Logits] | None:
        """The logits of the last prompt rows read, (ids, rows), for Token Recycling."""
        return self._reader.prompt_rows

    def prefill_tokens(self, prompt: list[int], logit_rows: int = 0) -> int:
        """Make the cache hold prompt[:-1]; returns how many tokens were reused."""
        return self._reader.prefill(prompt, logit_rows)

    def prefill_logits(self, messages: list[Message]) -> Logits:
        """Logits the model gives after the rendered prompt, through the KV-reusing path
        (what the first reply token is chosen from). Leaves the cache holding the prompt."""
        prompt = self.render(messages)
        self._reader.prefill(prompt)
        try:
            logits: Logits = self._engine.forward([prompt[-1]])[-1].copy()
        except BaseException:  # a Ctrl-C too: the cache restored, then re-raised
            self._reader.restore()
            raise
        self._reader.tokens.append(prompt[-1])
        return logits

    def measure_cost_curve(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Measure this machine's verification costs now (once per model and machine, then
        cached): what sizes drafts. Call it when nothing else runs, since it times the CPU.
        `cancelled()` true stops it (MeasurementCancelled; nothing is kept)."""
        self._planner.measure(cancelled)

    @property
    def curve_missing(self) -> bool:
        """A reply ran plainly because this machine's cost curve is not measured yet."""
        return self._planner.curve_missing

    def _calibrate(self, pending: int) -> float:
        """Time one single-token forward (then drop its row): the plain-decoding step cost."""
        t0 = time.perf_counter()
        try:
            self._engine.forward([pending])
            return time.perf_counter() - t0
        finally:
            self._reader.restore()

    # -- the decoding loop --------------------------------------------------------------------

    def verify_step(
        self, pending: int, tree: DraftTree | None, sampler: Sampler
    ) -> tuple[list[int], list[int], int, Logits]:
        """One forward over [pending] + draft; commits pending and the accepted path to the
        cache. Returns (input ids, accepted input indices, bonus token, logits)."""
        return verify_step(self._reader, pending, tree, sampler)

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
        t_start = time.perf_counter()
        prompt, notice, drafting = self._plan_reply(messages, params)
        reused = self._reader.keep_prefix(prompt)
        logit_rows = self._prompt_logit_rows(drafting)
        stopped = yield from self._reader.read(prompt, logit_rows, cancel)
        if stopped:
            drafting = None
        elif drafting is not None:
            drafting.begin(prompt, self._reader.prompt_rows)
        reply = self._new_reply(prompt, params, reused, notice, t_start)
        # Invariant: the cache holds every committed token but reply.pending.
        while reply.finish is None:
            timer = StepTimer()  # the step's engine and host seconds
            budget = reply.budget(cancel, self.context_limit)
            if budget is None:  # cancelled, or the context is full
                break
            tree, decision = self._draft(drafting, budget)
            timer.drafted()
            step = self._verify(reply, tree, drafting, timer.verify)
            if step is None:  # the model rejected a tree mask: step again without a tree
                continue
            timer.verified()
            new, sources = self._accept(reply, drafting, tree, decision, *step)
            timer.learned()
            delta = reply.commit(new, sources)
            size = len(tree) if tree is not None else 0
            stats = timer.stats(decision.drafter, size, len(new) - 1, step[1])
            if drafting is not None:  # what the host's part of such a step costs, priced
                drafting.timed(decision.drafter, size + 1, stats.host.per_step, stats.engine_s)
            yield stats
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
        begin_reply(self._planner.acceptance)
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
        trees = self.tree_reason is None
        return self._planner.plan(context, self.plain_reason, trees)

    def _draft(self, drafting: Drafting | None, budget: int) -> tuple[DraftTree | None, Decision]:
        """The policy's draft for this step (None: a plain step) and why."""
        if drafting is None:
            return None, PLAIN
        return drafting.choose(budget, self._engine.exact_rows, self._since_plain)

    def _verify(
        self, reply: Reply, tree: DraftTree | None, drafting: Drafting | None, times: VerifyTimes
    ) -> tuple[Verified, float] | None:
        """Verify the draft in one forward: what it accepted and the verification's seconds
        (`times`: its parts); None when the model rejected a tree mask (tree drafts are off
        from then on)."""
        t0 = time.perf_counter()
        try:
            verified = verify_step(self._reader, reply.pending, tree, reply.sampler, times)
        except BaseException as exc:  # a Ctrl-C is re-raised below, the cache restored
            self._reader.restore()
            if not isinstance(exc, Exception) or tree is None or tree.is_sequence:
                raise
            # The model rejected the 4D tree mask: sequence drafts from now on.
            self.tree_reason = f"tree verification failed ({type(exc).__name__}: {exc})"
            log.warning("tree drafts disabled: %s", self.tree_reason)
            if drafting is not None:
                drafting.trees_failed()
            return None
        return verified, time.perf_counter() - t0

    def _accept(
        self,
        reply: Reply,
        drafting: Drafting | None,
        tree: DraftTree | None,
        decision: Decision,
        verified: Verified,
        forward_s: float,
    ) -> tuple[list[int], list[str]]:
        """Take the accepted tokens (bonus included) and their drafters; the policy learns."""
        ids, path, bonus, logits = verified
        reply.stepped(bonus, forward_s, plain=tree is None)
        self._since_plain = 0 if tree is None else self._since_plain + 1
        new = [ids[j] for j in path]
        new.append(bonus)
        sources = [tree.source_at(j - 1) for j in path] if tree is not None else []
        if drafting is not None:
            drafting.learn(decision, ids, logits, new, sources)
        sources.append("plain")
        return new, sources

    def _end_reply(self, reply: Reply, drafting: Drafting | None) -> Iterator[Event]:
        # Decoding ends with the last token: what the drafters keep of the reply (Token
        # Recycling writes its table) is after it, as the front ends' live figures are.
        seconds = time.perf_counter() - reply.t_decode
        if drafting is not None:
            drafting.finish()
        tail = reply.close()
        if tail is not None:
            yield tail
        # The speedup estimate prices the reply's tokens at a one-token forward timed under the
        # same load: this reply's plain steps, else one forward now (after `seconds`: no
        # decoding). Another reply's timing would compare different loads.
        t1 = 0.0
        if reply.n_plain:
            t1 = reply.forward_plain / reply.n_plain
        elif reply.finish != "cancelled":
            t1 = self._calibrate(reply.pending)
        yield reply.done(seconds, t1)
