"""ChatSession: one conversation with a model. It keeps the KV cache across calls, so a new turn
(or an edit, a branch, a regeneration) prefills only the tokens after the longest common prefix,
and it streams each reply with speculative decoding (or plain decoding) as events."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from samchat.decoding import fastpath
from samchat.decoding.budget import AcceptanceModel, CostCurve, CostTracker, load_or_measure
from samchat.decoding.drafter import PLAIN, Decision, Drafter, Selector
from samchat.decoding.events import Event, ReplyDone, ReplyStats, StepStats, TextDelta
from samchat.decoding.forward import ModelForward
from samchat.decoding.kvcache import KVCache
from samchat.decoding.params import DecodingConfig, SamplingParams
from samchat.decoding.provenance import AttributedText
from samchat.decoding.sampling import Sampler
from samchat.decoding.textstream import IncrementalDetokenizer, StopMatcher
from samchat.decoding.tree import DraftTree
from samchat.errors import SamchatError

log = logging.getLogger(__name__)

Message = dict[str, str]

PREFILL_CHUNK = 2048
CALIBRATE_EVERY = 48
# Per model object and device, weakly: an id() key could be reused by a later model.
_CURVES: weakref.WeakKeyDictionary[Any, dict[str, CostCurve]] = weakref.WeakKeyDictionary()


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ChatSession:
    """Holds the KV cache of one conversation; generate() streams one reply."""

    def __init__(
        self,
        lm: Any,
        config: DecodingConfig | None = None,
        static_index: Any = None,
        cost_curve: CostCurve | None = None,
    ) -> None:
        self.lm = lm
        self.config = config or DecodingConfig()
        self.config.validate()
        self._model = lm.model
        self._tok = lm.tokenizer
        self._device: torch.device = lm.device
        self._eos = frozenset(int(i) for i in lm.eos_ids)
        self._kv = KVCache(self._model)
        self._fwd = ModelForward(self._model)
        self._cached: list[int] = []  # the tokens whose keys/values the cache holds, in order
        limit: Any = getattr(lm, "context_limit", None)
        if limit is None:
            limit = getattr(self._model.config, "max_position_embeddings", None) or 2048
        self.context_limit = int(limit)
        self._dtype = next(self._model.parameters()).dtype
        # Why drafting is limited on this model (None = trees and sequences both work).
        self.tree_reason: str | None = None
        self.plain_reason: str | None = None
        impl = str(getattr(self._model.config, "_attn_implementation", None) or "eager")
        if not self._kv.compactable:
            self.plain_reason = "its KV cache layers (sliding window or other) cannot be compacted"
        elif impl not in ("eager", "sdpa", fastpath.ATTN_NAME):
            self.tree_reason = f"attention implementation {impl!r} takes no 4D tree mask"
        for reason in (self.plain_reason, self.tree_reason):
            if reason:
                log.info("%s: %s", getattr(lm, "name", "model"), reason)
        self._acceptance = AcceptanceModel()
        self._curve = cost_curve
        self._tracker: CostTracker | None = None
        self._t1: float | None = None  # one-token forward time (EMA of plain steps)
        self._static_index = static_index
        self._dyn: Drafter | None = None
        self._static: Drafter | None = None
        self.aux_drafter: Drafter | None = None  # Token Recycling plugs in here
        self._aux_tried = False

    # -- public knobs -------------------------------------------------------------------------

    @property
    def static_index(self) -> Any:
        return self._static_index

    @static_index.setter
    def static_index(self, index: Any) -> None:
        """The static index may be opened after the model; set (or clear) it any time."""
        self._static_index = index
        self._static = None

    def set_static_index(self, index: Any) -> None:
        self.static_index = index

    @property
    def cached_tokens(self) -> int:
        return len(self._cached)

    def reset(self) -> None:
        """Forget the KV cache (the next call prefills everything)."""
        self._kv.reset()
        self._cached = []

    # -- prompt -------------------------------------------------------------------------------

    def render(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat template for messages, with the assistant prompt appended."""
        try:
            text = self._tok.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # jinja errors: a template that rejects this conversation
            raise SamchatError(f"the chat template rejected the messages: {exc}") from exc
        ids: list[int] = self._tok(text, add_special_tokens=False)["input_ids"]
        return ids

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
            idx = next((i for i, m in enumerate(msgs[:-1]) if m["role"] != "system"), None)
            if idx is None:
                raise SamchatError(
                    f"the message is too long for the model's context ({len(ids)} tokens, "
                    f"limit {self.context_limit} incl. {reserve} for the reply); shorten it"
                )
            del msgs[idx]
            dropped += 1
            while idx < len(msgs) - 1 and msgs[idx]["role"] == "assistant":
                del msgs[idx]  # a conversation does not start with an assistant turn
                dropped += 1
            ids = self.render(msgs)
        notice = ""
        if dropped:
            notice = f"dropped the {dropped} oldest message(s) to fit the model's context"
        return ids, notice

    # -- model calls --------------------------------------------------------------------------

    def _forward(
        self,
        ids: list[int],
        mask: torch.Tensor | None = None,
        pos: torch.Tensor | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        inp = torch.tensor([ids], dtype=torch.long, device=self._device)
        return self._fwd(inp, self._kv.cache, mask, pos, last_only)

    def _restore(self) -> None:
        """After a failed forward the layers may hold different row counts: cut them back."""
        try:
            self._kv.crop(len(self._cached))
            if self._kv.length != len(self._cached):
                raise RuntimeError("cache length mismatch")
        except Exception:
            self.reset()

    def prefill_tokens(self, prompt: list[int]) -> int:
        """Make the cache hold prompt[:-1]; returns how many tokens were reused."""
        keep = min(common_prefix(self._cached, prompt), len(prompt) - 1)
        try:
            with torch.inference_mode():
                self._kv.crop(keep)
                del self._cached[keep:]
                rest = prompt[keep:-1]
                for i in range(0, len(rest), PREFILL_CHUNK):
                    chunk = rest[i : i + PREFILL_CHUNK]
                    self._forward(chunk, last_only=True)
                    self._cached.extend(chunk)
        except BaseException:
            self._restore()
            raise
        return keep

    def prefill_logits(self, messages: list[Message]) -> torch.Tensor:
        """Logits the model gives after the rendered prompt, through the KV-reusing path
        (what the first reply token is chosen from). Leaves the cache holding the prompt."""
        prompt = self.render(messages)
        self.prefill_tokens(prompt)
        with torch.inference_mode():
            logits = self._forward([prompt[-1]])[-1].clone()
        self._cached.append(prompt[-1])
        return logits

    def _curve_for_device(self) -> CostCurve:
        if self._curve is None:
            per_device = _CURVES.setdefault(self._model, {})
            key = str(self._device)
            curve = per_device.get(key)
            if curve is None:
                from samchat.paths import cache_dir

                ident = f"{getattr(self.lm, 'source', '')}|{getattr(self.lm, 'name', '')}"
                ident += f"|{self._device}|{self._dtype}"
                digest = hashlib.sha256(ident.encode()).hexdigest()[:16]
                path = cache_dir() / "costs" / f"{digest}.json"
                curve = load_or_measure(self._model, self._device, path)
                per_device[key] = curve
            self._curve = curve
        return self._curve

    def _calibrate(self, pending: int) -> float:
        """Time one single-token forward (then drop its row): the plain-decoding step cost."""
        n = len(self._cached)
        with torch.inference_mode():
            t0 = time.perf_counter()
            self._forward([pending])
            dt = time.perf_counter() - t0
            self._kv.crop(n)
        return dt

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
                self.aux_drafter = _make_recycling(self.lm)
            aux = self.aux_drafter
        return dyn, static, aux

    # -- the decoding loop --------------------------------------------------------------------

    def verify_step(
        self, pending: int, tree: DraftTree | None, sampler: Sampler
    ) -> tuple[list[int], list[int], int, torch.Tensor]:
        """One forward over [pending] + draft; commits pending and the accepted path to the
        cache. Returns (input ids, accepted input indices, bonus token, logits)."""
        n_cached = len(self._cached)
        mask = pos = None
        if tree is None:
            ids = [pending]
        else:
            ids = [pending, *tree.tokens]
            if not tree.is_sequence:
                lay = tree.layout()
                mask = lay.attention_mask(n_cached, self._dtype, self._device)
                pos = lay.position_ids(n_cached, self._device)
        logits = self._forward(ids, mask, pos)
        choose: Callable[[int], int]
        if sampler.greedy:
            # Only the rows the walk visits: an argmax over every row of a big tree costs
            # milliseconds on a CPU.
            def choose(j: int) -> int:
                return int(logits[j].argmax())
        else:

            def choose(j: int) -> int:
                return sampler.choose(logits[j])

        if tree is None:
            path: list[int] = []
            bonus = choose(0)
        elif mask is None:  # a sequence: accept while the model agrees
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
            path, bonus = tree.layout().walk(choose)
        self._kv.compact(n_cached, [0, *path])
        self._cached.append(pending)
        self._cached.extend(ids[j] for j in path)
        return ids, path, bonus, logits

    def generate(
        self,
        messages: list[Message],
        params: SamplingParams | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[Event]:
        """Stream the reply to `messages` (ending with a user turn) as TextDelta and StepStats
        events, then one ReplyDone."""
        params = params or SamplingParams()
        params.validate()
        t_start = time.perf_counter()
        prompt, notice = self._fit(messages, params)
        reused = self.prefill_tokens(prompt)

        dyn, static, aux = self._drafters()
        drafters = [d for d in (dyn, static, aux) if d is not None]
        for d in drafters:
            d.begin(prompt)
        watchers = [d for d in drafters if d.wants_logits]
        selector = None
        if drafters:
            if self._tracker is None:
                self._tracker = CostTracker(self._curve_for_device())
            tracker = self._tracker
            selector = Selector(self.config, tracker.curve, self._acceptance, dyn, static, aux)
            selector.trees_allowed = self.tree_reason is None

        # Setup (drafters, a first cost-curve measurement) counts as prefill, not decoding.
        t_decode = time.perf_counter()
        prefill_s = t_decode - t_start
        sampler = Sampler(params, self._device)
        detok = IncrementalDetokenizer(self._tok)
        stopper = StopMatcher(params.stop)
        out = AttributedText(detok)  # who drafted each character of detok.text
        eos = self._eos
        pending = prompt[-1]
        produced = 0  # reply tokens (EOS excluded)
        committed = 0  # tokens committed by verification steps (EOS included), for MAT
        steps = 0
        emitted = 0  # characters of detok.text already sent
        searched = 0  # characters of detok.text already searched for stop strings
        accepted_by: dict[str, int] = {}
        ttft = 0.0
        finish: str | None = None
        stop_at = -1
        forward_plain = 0.0
        n_plain = 0

        while finish is None:
            if cancel is not None and cancel.is_set():
                finish = "cancelled"
                break
            room = self.context_limit - len(prompt) - produced  # tokens that still fit
            if room <= 0:
                finish = "context"
                break
            budget = min(params.max_new_tokens - produced - 1, room - 1)
            tree: DraftTree | None = None
            decision: Decision = PLAIN
            # Now and then a plain step keeps the one-token forward time (the cost curve's
            # unit and speedup_est's baseline) measured under the machine's current load.
            if selector is not None and budget > 0 and steps % CALIBRATE_EVERY != 1:
                tree, decision = selector.choose(budget)
            t0 = time.perf_counter()
            try:
                with torch.inference_mode():
                    ids, path, bonus, logits = self.verify_step(pending, tree, sampler)
            except BaseException as exc:
                self._restore()
                if not isinstance(exc, Exception) or tree is None or tree.is_sequence:
                    raise
                # The model rejected the 4D tree mask: sequence drafts from now on.
                self.tree_reason = f"tree verification failed ({type(exc).__name__}: {exc})"
                log.warning("tree drafts disabled: %s", self.tree_reason)
                if selector is not None:
                    selector.trees_allowed = False
                continue
            forward_s = time.perf_counter() - t0
            steps += 1
            if selector is not None and tracker.record(len(ids), forward_s):
                selector.curve = tracker.curve
            if tree is None:
                forward_plain += forward_s
                n_plain += 1
            n_acc = len(path)
            new = [ids[j] for j in path]
            new.append(bonus)
            sources = [decision.drafter] * n_acc if tree is not None else []
            sources.append("plain")
            if selector is not None:
                selector.feedback(decision, n_acc)
                for d in drafters:
                    d.advance(new)
                for d in watchers:
                    d.observe(ids, logits)
            pending = bonus
            size = len(tree) if tree is not None else 0
            yield StepStats(decision.drafter, size, n_acc, forward_s)

            # Commit the new tokens one by one exactly as plain decoding would have.
            take = 0
            for t in new:
                committed += 1
                if t in eos:
                    finish = "eos"
                    break
                take += 1
                produced += 1
                if produced >= params.max_new_tokens:
                    finish = "length"
                    break
            toks = new[:take]
            srcs = sources[:take]
            # Token by token, so each character is credited to the drafter of its token.
            for k, (t, src) in enumerate(zip(toks, srcs, strict=True)):
                out.push(t, src)
                if stopper:
                    stop_at = stopper.find(detok.text, searched)
                    searched = len(detok.text)
                    if stop_at != -1:
                        finish = "stop"
                        toks, srcs = toks[: k + 1], srcs[: k + 1]
                        produced -= take - (k + 1)
                        break
            for s in srcs:
                accepted_by[s] = accepted_by.get(s, 0) + 1
            if finish is not None and finish != "stop":
                out.flush()
            text = detok.text
            if finish == "stop":
                end = stop_at
            elif stopper and finish is None:
                end = stopper.safe_len(text)
            else:
                end = len(text)
            if toks or end > emitted:
                if ttft == 0.0:
                    ttft = time.perf_counter() - t_start
                yield TextDelta(
                    text[emitted:end],
                    toks,
                    srcs,
                    out.pieces(emitted, end),
                )
                emitted = max(emitted, end)

        for d in drafters:
            d.finish()
        if finish in ("cancelled", "context"):
            out.flush()  # the unfinished character and any stop-string hold-back
        final = detok.text[:stop_at] if finish == "stop" else detok.text
        if len(final) > emitted:
            rest = final[emitted:]
            yield TextDelta(rest, [], [], out.pieces(emitted, len(final)))
        seconds = time.perf_counter() - t_decode
        if n_plain:
            t1 = forward_plain / n_plain
            self._t1 = t1 if self._t1 is None else 0.7 * self._t1 + 0.3 * t1
        elif self._t1 is None and finish != "cancelled":
            self._t1 = self._calibrate(pending)
        t1_est = self._t1 or 0.0
        speedup = committed * t1_est / seconds if seconds > 0 and t1_est > 0 else 1.0
        stats = ReplyStats(
            tokens=produced,
            seconds=seconds,
            tokens_per_s=produced / seconds if seconds > 0 else 0.0,
            steps=steps,
            mat=committed / steps if steps else 0.0,
            accepted_by_drafter=accepted_by,
            speedup_est=speedup,
            prefill_s=prefill_s,
            ttft_s=ttft,
            prompt_tokens=len(prompt),
            reused_tokens=reused,
            method=self.config.method,
            provenance=tuple(out.provenance.runs(0, len(final))),
        )
        yield ReplyDone(final, finish, stats, notice)


def _make_dynamic() -> Drafter | None:
    try:
        from samchat.decoding.sam_drafters import DynamicSamDrafter
    except ImportError as exc:
        log.warning("dynamic SAM drafter unavailable: %s", exc)
        return None
    return DynamicSamDrafter()


def _make_static(index: Any, config: DecodingConfig) -> Drafter | None:
    try:
        from samchat.decoding.sam_drafters import StaticSamDrafter
    except ImportError as exc:
        log.warning("static SAM drafter unavailable: %s", exc)
        return None
    return StaticSamDrafter(index, context=config.static_context, tree_topk=config.static_tree_topk)


def _make_recycling(lm: Any) -> Drafter | None:
    from samchat.decoding.recycling import TokenRecyclingDrafter

    return TokenRecyclingDrafter.for_model(lm)
