"""The llama.cpp engine end to end on the real default model, run straight from its bundled
Q4_1 GGUF: speculative output equals the same engine's plain decoding token for token, tree
verification gives exactly the logits of one-token decoding along each path, the KV cache is
reused across turns, a cancelled reply leaves the cache usable, and bad input is one line."""

from __future__ import annotations

import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from samchat.decoding import (
    ChatSession,
    DecodingConfig,
    PrefillProgress,
    ReplyDone,
    SamplingParams,
    StepStats,
    TextDelta,
)
from samchat.decoding.tree import DraftTree
from samchat.engines import Logits
from samchat.engines.costs import CostCurve
from samchat.engines.costs.cache import load_cached, save_curve
from samchat.engines.llamacpp.engine import F16, LONG_READ, Q8_0, LlamaCppEngine, curve_digest
from samchat.errors import ModelLoadError, SamchatError
from samchat.models.loader import ModelSpec, load_model
from tests.decoding.prompts import (
    LONG_CONTEXT,
    MULTI_TURN,
    SAMPLE_MULTI,
    SAMPLE_SINGLE,
    SINGLE_TURN,
)
from tests.decoding.test_session_model import MSG, _run, _static_index
from tests.fakes import FakeDrafter

MAX_NEW = 24  # drafts, trees and, on long prompts, keys past a 256-row window
CPU_CURVE = CostCurve.default("cpu")
# Verification priced as free: the selector drafts the biggest trees it has, every step.
FLAT = CostCurve({1: 1.0, 64: 1.0})


def test_auto_runs_the_default_model_from_its_gguf(gguf_lm: Any) -> None:
    assert gguf_lm.engine == "llamacpp"
    assert gguf_lm.dtype == "Q4_1"
    assert gguf_lm.source.endswith(".gguf")
    assert load_model.__module__ == "samchat.models.loader"
    from samchat.models.loader import choose_engine

    assert choose_engine(ModelSpec()) == "llamacpp"  # llama-cpp-python is installed here
    assert choose_engine(ModelSpec(dtype="bfloat16")) == "torch"


_PLAIN: dict[str, list[int]] = {}


def _plain_ids(plain: ChatSession, messages: list[dict[str, str]], params: Any) -> list[int]:
    """Plain decoding's reply on this engine, computed once per run for both curves' checks."""
    key = json.dumps(messages)
    if key not in _PLAIN:
        _PLAIN[key], _, _ = _run(plain, messages, params)
    return _PLAIN[key]


@pytest.mark.parametrize(
    ("curve", "singles", "chats"),
    [
        pytest.param(CPU_CURVE, SINGLE_TURN + LONG_CONTEXT, MULTI_TURN, id="cpu-curve"),
        # On every core: the largest trees, where the thread count could change a row's sums.
        pytest.param(
            FLAT, SAMPLE_SINGLE, SAMPLE_MULTI, id="flat-curve", marks=pytest.mark.all_cores
        ),
    ],
)
def test_greedy_speculative_equals_plain_on_real_prompts(
    gguf_lm: Any, tmp_path: Path, curve: CostCurve, singles: list[str], chats: list[list[str]]
) -> None:
    """The prompts of the torch engine's test, all of them on the CPU's curve and a third on
    the flat one: single questions, multi-turn chats with the KV cache reused across turns,
    and long-passage summaries."""
    params = SamplingParams(max_new_tokens=MAX_NEW)
    index = _static_index(tmp_path, gguf_lm)
    spec = ChatSession(gguf_lm, DecodingConfig(method="sam+tr"), index, curve)
    plain = ChatSession(gguf_lm, DecodingConfig(method="plain"))
    checked = drafted = trees = 0
    for prompt in singles:
        messages = [{"role": "user", "content": prompt}]
        want = _plain_ids(plain, messages, params)
        ids, done, events = _run(spec, messages, params)
        assert ids == want, prompt
        steps = [e for e in events if isinstance(e, StepStats)]
        drafted += sum(e.accepted for e in steps)
        trees += sum(1 for e in steps if e.draft_size > 1)
        checked += 1
    for turns in chats:
        history = [{"role": "system", "content": "You are a concise assistant."}]
        for turn in turns:
            history.append({"role": "user", "content": turn})
            want = _plain_ids(plain, history, params)
            ids, done, _ = _run(spec, history, params)
            assert ids == want, turn
            if len(history) > 2:
                assert done.stats.reused_tokens > 0
            history.append({"role": "assistant", "content": done.text})
        checked += 1
    assert checked >= 6
    assert drafted > 0  # drafts were accepted: the speculative path ran
    if curve is FLAT:
        assert trees > 0


class _Plain:
    """One-token decoding, the reference for tree rows: holds a context, and gives the logits
    along a path decoded after it (then forgets the path)."""

    def __init__(self, lm: Any, context: list[int], kv: int = Q8_0) -> None:
        self.engine = LlamaCppEngine(lm, n_ctx=2048, kv=kv)
        self.engine.prefill(context)

    def rows(self, path: list[int]) -> list[Logits]:
        n = self.engine.length
        out = [self.engine.forward([t])[0] for t in path]
        self.engine.crop(n)
        return out

    def advance(self, tokens: list[int]) -> None:
        for t in tokens:
            self.engine.forward([t])


def _random_tree(rng: random.Random, likely: list[int], size: int) -> DraftTree:
    """Random shape; tokens mostly from the plain continuation so that paths get accepted."""
    tokens: list[int] = []
    parents: list[int] = []
    for i in range(size):
        parent = rng.randrange(-1, i)
        depth = 0
        p = parent
        while p != -1:
            depth += 1
            p = parents[p]
        pool = likely[depth + 1 : depth + 2] if rng.random() < 0.6 else []
        tokens.append(pool[0] if pool else rng.randrange(49152))
        parents.append(parent)
    return DraftTree(tokens, parents, "tr")


@pytest.mark.all_cores  # one-token steps on 2+ threads take another path (engine.py, F16)
def test_tree_verification_is_exact_on_random_trees(gguf_lm: Any) -> None:
    """Step after step of random trees: each node's logits row equals one-token decoding along
    its path, bit for bit, whichever path is committed (the cache then continues exactly as
    plain decoding would, dropped branches and recomputed rows included). With both cache
    types; with F16 also after 800+ tokens, where one-token attention would be split between
    threads."""
    rng = random.Random(7)
    for case, kv in enumerate((Q8_0, Q8_0, F16, F16)):
        question = "Describe the river Lune briefly."
        content = question if case < 3 else "\n\n".join([*LONG_CONTEXT, question])
        messages = [{"role": "user", "content": content}]
        session = ChatSession(gguf_lm, DecodingConfig(method="plain"))
        prompt = session.render(messages)
        assert case < 3 or len(prompt) > 800
        plain, _, _ = _run(session, messages, SamplingParams(max_new_tokens=32))
        engine = LlamaCppEngine(gguf_lm, n_ctx=2048, kv=kv)
        ref = _Plain(gguf_lm, prompt[:-1], kv)
        try:
            engine.prefill(prompt[:-1])
            pending = prompt[-1]
            likely = [pending, *plain]
            for step in range(5):
                start = engine.length
                tree = _random_tree(rng, likely, rng.randrange(1, 16))
                layout = tree.layout()
                ids = [pending, *tree.tokens]
                rows = engine.forward(ids, layout)
                assert rows.shape == (len(ids), gguf_lm.vocab_size)
                for j in range(len(ids)):
                    if any(layout.parents[k] == j for k in range(len(ids))):
                        continue  # not a leaf: its row is checked on a leaf's path
                    path = [j]
                    while layout.parents[path[-1]] != -1:
                        path.append(layout.parents[path[-1]])
                    path.reverse()
                    want = ref.rows([ids[k] for k in path])
                    for k, row in zip(path, want, strict=True):
                        assert np.array_equal(rows[k], row), (case, step, k)
                node = rng.randrange(len(ids))
                keep = [node]
                while layout.parents[keep[-1]] != -1:
                    keep.append(layout.parents[keep[-1]])
                keep.reverse()
                engine.commit(start, keep)
                assert engine.length == start + len(keep)
                ref.advance([ids[k] for k in keep])
                pending = int(rows[node].argmax())
                likely = [pending, *rng.sample(plain, 8)]
        finally:
            ref.engine.close()
            engine.close()


@pytest.mark.all_cores
def test_rows_left_over_by_a_tree_are_read_as_plain_decoding_read_them(gguf_lm: Any) -> None:
    """An accepted token that did not lead its tree's batch is recomputed with the next
    forward; in an F16 cache, before a long prefill (the next turn), in a forward of its own,
    since 64+ rows would round it differently. The cache then continues as one-token
    decoding's: the next logits agree bit for bit."""
    messages = [{"role": "user", "content": "Describe the river Lune briefly."}]
    prompt = ChatSession(gguf_lm, DecodingConfig(method="plain")).render(messages)
    a, b, turn = 1000, 2000, [(t * 7919) % 40000 + 100 for t in range(100)]
    spec, plain = (LlamaCppEngine(gguf_lm, n_ctx=1024, kv=F16) for _ in range(2))
    try:
        for engine in (spec, plain):
            engine.prefill(prompt[:-1])
        start = spec.length
        spec.forward([prompt[-1], a, b], DraftTree([a, b], [-1, -1], "tr").layout())
        spec.commit(start, [0, 2])  # b sat behind a: it waits for the next forward
        for t in (prompt[-1], b):
            plain.forward([t])
        assert spec.length == plain.length == start + 2
        for engine in (spec, plain):
            engine.prefill(turn)
        assert np.array_equal(spec.forward([7]), plain.forward([7]))
    finally:
        spec.close()
        plain.close()


@pytest.mark.all_cores
def test_kv_reuse_across_turns_matches_plain_decoding_and_a_fresh_prefill(gguf_lm: Any) -> None:
    """A short chat (a Q8_0 cache): the second turn's logits after a speculative first reply
    equal, bit for bit, those after a plain one, and those of a fresh prefill of it all."""
    messages = [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "Name a large city in Japan."},
    ]
    chats = {}
    for method in ("sam+tr", "plain"):
        session = ChatSession(gguf_lm, DecodingConfig(method=method), cost_curve=FLAT)
        _, done, _ = _run(session, messages, SamplingParams(max_new_tokens=24))
        chats[method] = (session, done.text)
    session, text = chats["sam+tr"]
    assert text == chats["plain"][1]
    messages += [
        {"role": "assistant", "content": text},
        {"role": "user", "content": "What is it famous for?"},
    ]
    before = session.cached_tokens
    logits = session.prefill_logits(messages)
    assert np.array_equal(logits, chats["plain"][0].prefill_logits(messages))
    prompt = session.render(messages)
    fresh = ChatSession(gguf_lm, DecodingConfig(method="plain"))
    assert before > 20
    assert np.array_equal(logits, fresh.prefill_logits(messages))
    assert fresh.cached_tokens == len(prompt)
    # An edited earlier turn: reuse stops at the edit, and the logits are the fresh ones.
    edited = [messages[0], {"role": "user", "content": "Name a large city in Italy."}]
    again = ChatSession(gguf_lm, DecodingConfig(method="plain"))
    assert np.array_equal(session.prefill_logits(edited), again.prefill_logits(edited))


@pytest.mark.all_cores
def test_a_chat_that_opens_with_a_long_read_takes_f16_and_stays_exact(
    gguf_lm: Any, tmp_path: Path
) -> None:
    """A document question opens the chat: its cache is F16 (read twice as fast), and
    speculative replies still equal plain ones, turn after turn; a fresh prefill of the chat
    predicts the same (64+ rows at once round differently). A new short chat is Q8_0 again."""
    params = SamplingParams(max_new_tokens=MAX_NEW)
    spec = ChatSession(
        gguf_lm, DecodingConfig(method="sam+tr"), _static_index(tmp_path, gguf_lm), FLAT
    )
    plain = ChatSession(gguf_lm, DecodingConfig(method="plain"))
    doc = "\n\n".join(LONG_CONTEXT)
    history = [{"role": "system", "content": "You are a concise assistant."}]
    for turn in (f"{doc}\n\nWhich text is about a river?", "Say it in one sentence.", "Why?"):
        history.append({"role": "user", "content": turn})
        want, _, _ = _run(plain, history, params)
        ids, done, _ = _run(spec, history, params)
        assert ids == want, turn
        assert spec.engine.kv == plain.engine.kv == F16
        history.append({"role": "assistant", "content": done.text})
    history.append({"role": "user", "content": "Thanks."})
    logits = spec.prefill_logits(history)
    fresh = ChatSession(gguf_lm, DecodingConfig(method="plain")).prefill_logits(history)
    assert int(logits.argmax()) == int(fresh.argmax())
    assert np.corrcoef(logits, fresh)[0, 1] > 0.99
    short = [{"role": "user", "content": "Name a colour."}]
    assert len(spec.render(short)) < LONG_READ
    assert _run(spec, short, params)[0] == _run(plain, short, params)[0]
    assert spec.engine.kv == plain.engine.kv == Q8_0


def test_a_long_read_stays_on_q8_0_where_an_f16_cache_does_not_fit(
    gguf_lm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F16 takes twice Q8_0's memory: where its context cannot be made, the chat goes on with
    the cache it has, nothing dropped."""
    engine = LlamaCppEngine(gguf_lm, n_ctx=1024)
    try:
        engine.prefill([100, 200, 300])
        opened = LlamaCppEngine._open

        def no_f16(self: LlamaCppEngine, kv: int) -> None:
            if kv == F16:
                raise SamchatError("llama.cpp could not create a context (out of memory?)")
            opened(self, kv)

        monkeypatch.setattr(LlamaCppEngine, "_open", no_f16)
        engine.plan_read(3, 600)
        assert engine.kv == Q8_0 and engine.length == 3  # nothing dropped
        engine.prefill(list(range(400, 1000)))
        assert engine.length == 603
    finally:
        engine.close()


@pytest.mark.parametrize("tree", [False, True])
def test_cancelled_reply_leaves_the_cache_usable(gguf_lm: Any, tree: bool) -> None:
    plain = ChatSession(gguf_lm, DecodingConfig(method="plain"))
    ids, _, _ = _run(plain, MSG, SamplingParams(max_new_tokens=48))
    session = ChatSession(gguf_lm, DecodingConfig(method="tr", adaptive=False), cost_curve=FLAT)
    shape = "siblings" if tree else "sequence"
    session.aux_drafter = FakeDrafter("tr", ids, shape=shape, follow=True, tree_sizes=(12,))
    cancel = threading.Event()
    got: list[int] = []
    done = None
    for ev in session.generate(MSG, SamplingParams(max_new_tokens=48), cancel):
        if isinstance(ev, StepStats) and ev.accepted > 2:
            cancel.set()
        elif isinstance(ev, TextDelta):
            got.extend(ev.token_ids)
        elif isinstance(ev, ReplyDone):
            done = ev
    assert done is not None and done.finish_reason == "cancelled"
    assert 2 < len(got) < len(ids) and got == ids[: len(got)]
    assert session.engine.length == session.cached_tokens
    again, _, _ = _run(session, MSG, SamplingParams(max_new_tokens=48))
    assert again == ids
    # A stream dropped mid-reply (the consumer walked away) too.
    stream = session.generate(MSG, SamplingParams(max_new_tokens=48))
    for ev in stream:
        if isinstance(ev, StepStats) and ev.accepted > 0:
            break
    stream.close()
    again, _, _ = _run(session, MSG, SamplingParams(max_new_tokens=48))
    assert again == ids


def test_a_long_prompt_is_read_in_pieces_with_progress_and_can_be_cancelled(
    gguf_lm: Any,
) -> None:
    """A prompt of several prefill pieces: progress from 0 to all of it before the first
    token; the pieces leave the cache one llama_decode of the whole prompt leaves (the next
    logits bit for bit); a cancel between pieces ends the reply with no text, and the next
    reply reuses the pieces read and equals a fresh session's."""
    text = "\n\n".join(LONG_CONTEXT) + "\n\nSummarise the text above."
    messages = [{"role": "user", "content": text}]
    session = ChatSession(gguf_lm, DecodingConfig(method="sam+tr"), cost_curve=CPU_CURVE)
    prompt = session.render(messages)
    piece = session.engine.prefill_chunk
    assert len(prompt) > 2 * piece
    assert len(prompt) > LONG_READ  # the chat's cache is F16
    whole = LlamaCppEngine(gguf_lm, n_ctx=2048, kv=F16)
    try:
        whole.prefill(prompt[:-1])  # one call: llama.cpp's own micro-batches
        one_read = whole.forward([prompt[-1]])
    finally:
        whole.close()
    events = list(session.generate(messages, SamplingParams(max_new_tokens=16)))
    reading = [e for e in events if isinstance(e, PrefillProgress)]
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    total = len(prompt) - 1
    assert [(e.done, e.total) for e in reading[:2]] == [(0, total), (piece, total)]
    assert reading[-1].done == total and all(e.total == total for e in reading)
    assert max(events.index(e) for e in reading) < first_text
    assert session.engine.kv == F16
    assert np.array_equal(session.prefill_logits(messages), one_read[0])
    reply = [t for e in events if isinstance(e, TextDelta) for t in e.token_ids]

    cancel = threading.Event()
    fresh = ChatSession(gguf_lm, DecodingConfig(method="sam+tr"), cost_curve=CPU_CURVE)
    out: list[Any] = []
    for event in fresh.generate(messages, SamplingParams(max_new_tokens=16), cancel):
        out.append(event)
        if isinstance(event, PrefillProgress) and event.done > 0:
            cancel.set()
    done = out[-1]
    assert isinstance(done, ReplyDone) and done.finish_reason == "cancelled"
    assert done.text == "" and not any(isinstance(e, TextDelta) for e in out)
    assert fresh.cached_tokens == fresh.engine.length == piece  # one piece read, then stopped
    again, again_done, _ = _run(fresh, messages, SamplingParams(max_new_tokens=16))
    assert again == reply and again_done.stats.reused_tokens == piece


def test_a_cancel_during_a_piece_stops_it_midway_and_the_next_reply_is_unchanged(
    gguf_lm: Any,
) -> None:
    """A cancel that comes while llama.cpp reads a piece stops that piece at once (its abort
    callback), not after it: the reply ends with no text, the cache keeps no half piece, and
    the next reply equals a fresh session's."""
    text = "\n\n".join(LONG_CONTEXT) + "\n\nSummarise the text above."
    messages = [{"role": "user", "content": text}]
    params = SamplingParams(max_new_tokens=8)
    reference, _, _ = _run(
        ChatSession(gguf_lm, DecodingConfig(method="sam+tr"), cost_curve=CPU_CURVE),
        messages,
        params,
    )
    session = ChatSession(gguf_lm, DecodingConfig(method="sam+tr"), cost_curve=CPU_CURVE)
    engine = session.engine
    asked: list[float] = []
    stop = engine.stop_reading

    def stop_reading() -> None:
        asked.append(time.perf_counter())
        stop()

    engine.stop_reading = stop_reading  # type: ignore[method-assign]
    cancel = threading.Event()
    out: list[Any] = []
    for event in session.generate(messages, params, cancel):
        out.append(event)
        if isinstance(event, PrefillProgress) and event.done == 0:
            threading.Timer(0.05, cancel.set).start()  # while the first piece is read
    done = out[-1]
    assert isinstance(done, ReplyDone) and done.finish_reason == "cancelled" and done.text == ""
    assert len(asked) == 1  # asked once, during the first piece
    # The first piece (hundreds of tokens: far more than 50 ms of reading) was stopped midway.
    assert session.cached_tokens == engine.length == 0
    again, _, _ = _run(session, messages, params)
    assert again == reference


def test_a_file_that_is_not_gguf_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"not a model at all" * 10)
    with pytest.raises(ModelLoadError) as err:
        load_model(ModelSpec(source=str(bogus), engine="llamacpp"))
    assert "not a GGUF file" in str(err.value) and "\n" not in str(err.value)


def test_a_gguf_llama_cpp_cannot_load_is_one_line(tmp_path: Path) -> None:
    """A valid GGUF container with an architecture llama.cpp does not know."""
    import gguf

    path = tmp_path / "alien.gguf"
    writer = gguf.GGUFWriter(str(path), "alien-arch")
    writer.add_block_count(1)
    writer.add_tensor("weird.weight", torch.zeros(4, 4).numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    from samchat.engines.llamacpp.model import LlamaWeights

    with pytest.raises(ModelLoadError) as err:
        LlamaWeights.load(path)
    assert "could not load alien.gguf" in str(err.value) and "\n" not in str(err.value)


def test_context_overflow_is_one_line(gguf_lm: Any) -> None:
    session = ChatSession(gguf_lm, DecodingConfig(method="sam+tr"), cost_curve=FLAT)
    session.context_limit = 64
    with pytest.raises(SamchatError) as err:
        list(session.generate([{"role": "user", "content": "word " * 200}]))
    assert "too long for the model's context" in str(err.value)
    # The engine itself refuses a batch that does not fit its cache, in one line, and the
    # session stays usable afterwards.
    small = LlamaCppEngine(gguf_lm, n_ctx=256)
    try:
        small.prefill(list(range(100, 300)))
        with pytest.raises(SamchatError) as err2:
            small.forward(list(range(300, 400)))
        assert "\n" not in str(err2.value)
        small.crop(200)
        assert small.length == 200
        assert small.forward([5]).shape == (1, gguf_lm.vocab_size)
    finally:
        small.close()


def test_file_type_names_with_spaces(tmp_path: Path) -> None:
    """llama.cpp names some types with spaces ("Q4_K - Medium"); the whole name is kept."""
    import ctypes

    from samchat.engines.llamacpp.model import LlamaWeights, llama
    from samchat.models.default import bundled_gguf

    lib = llama()
    params = lib.llama_model_quantize_default_params()
    params.ftype = lib.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.allow_requantize = True
    target = tmp_path / "smol-q4km.gguf"
    assert (
        lib.llama_model_quantize(
            str(bundled_gguf()).encode(), str(target).encode(), ctypes.byref(params)
        )
        == 0
    )
    weights = LlamaWeights.load(target)
    try:
        assert weights.file_type == "Q4_K - Medium"
        assert 2 in weights.eog_ids  # <|im_end|> ends a turn
        assert weights.plain_reason is None
    finally:
        weights.close()


def test_a_curve_known_here_goes_into_a_cache_that_lacks_it(
    gguf_lm: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A curve this process read or measured is kept in another cache it meets, unmeasured:
    a second home, or the benches' engines that keep nothing, cost no second timing."""
    from samchat.engines.llamacpp import engine as llamacpp

    monkeypatch.setattr(gguf_lm.curves, "curves", {})

    def fail(*_: Any, **__: Any) -> CostCurve:
        raise AssertionError("measured again")

    monkeypatch.setattr(llamacpp, "measure_engine", fail)
    digest = curve_digest(gguf_lm)
    known = CostCurve({1: 1.0, 2: 1.5, 8: 4.0})
    save_curve(known, tmp_path / "a" / "costs" / f"{digest}.json")
    first = LlamaCppEngine(gguf_lm, n_ctx=512, cache_dir=tmp_path / "a")
    second = LlamaCppEngine(gguf_lm, n_ctx=512, cache_dir=tmp_path / "b")
    try:
        assert first.meter.cached_cost_curve() is not None
        assert second.meter.cost_curve().to_dict() == known.to_dict()
    finally:
        first.close()
        second.close()
    saved = load_cached(tmp_path / "b" / "costs" / f"{digest}.json")
    assert saved is not None and saved.to_dict() == known.to_dict()
