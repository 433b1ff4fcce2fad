"""Decoding benchmark on Spec-Bench-format questions: samchat's methods against plain and PLD,
on one or several engine/dtype configurations.

Protocol (as in Spec-Bench): greedy, chat template, each question's turns in order with the second
turn following the method's own first answer; speed = new tokens / wall time per question; a
category's speedup is the ratio of mean speeds. Methods alternate their order per question so
that machine drift spreads evenly over them.

Methods are named ENGINE[/DTYPE]:METHOD (`llamacpp:sam+tr`, `torch/bfloat16:plain`); a bare
METHOD runs on the default configuration (what --engine, or auto, picks for --model). Every
configuration's plain decoding runs too: it is the yardstick of that configuration's methods.
Here: the method names (`parse_methods`), the questions and the runner (`DecodeBench`);
baselines.py runs each engine's own prompt lookup, report.py turns the runs into the table.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NotRequired, TypedDict

from samchat.bench.baselines import PldLlama, llama_pld, llama_pld_reply, torch_pld
from samchat.bench.report import Question, Results, Run, reply_cost, split_key
from samchat.decoding.prompt import render_prompt
from samchat.engines.registry import KINDS, engine_kind, resolve
from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.names import METHODS, named

if TYPE_CHECKING:
    from samchat.corpus.importer import ImportSummary
    from samchat.corpus.retrieval import Source
    from samchat.decoding import ChatSession
    from samchat.engines.costs.curve import CostCurve, LongParts
    from samchat.models.loader import LoadedModel, ModelSpec
    from samchat.sam.index import StaticIndex
    from samchat.store import Store

ALL_METHODS = ("plain", "pld", "sam", "tr", "sam+tr")
BENCH_ENGINES = tuple(kind.name for kind in KINDS)
SYNTAX = "METHOD or ENGINE[/DTYPE]:METHOD"
Progress = Callable[[str], None]


class EngineDetails(TypedDict):
    """A configuration's engine in the benchmark's JSON: in words, and its measured curve."""

    engine: str
    context: int
    relative_cost: dict[str, float]
    long: NotRequired[LongParts]  # the same after longer contexts


def setup_label(engine: str, dtype: str = "auto") -> str:
    """A configuration's name: the engine that runs it, and the dtype unless it is auto
    (torch/bfloat16; flat/int4, however it was asked: torch/int4 or flat)."""
    engine, dtype = resolve(engine, dtype)
    return engine if dtype == "auto" else f"{engine}/{dtype}"


def dtype_problem(engine: str, dtype: str) -> str | None:
    """Why ENGINE/DTYPE names no configuration (an engine that takes no dtype, or not this
    one), or None."""
    engine, dtype = resolve(engine, dtype)
    kind = engine_kind(engine)
    if dtype in kind.dtypes:
        return None
    takers = " and ".join(k.name for k in KINDS if k.dtypes)
    if not kind.dtypes:
        return f"{kind.label} runs the GGUF file's own types, so it takes no dtype ({takers} do)"
    return f"{kind.label} takes {', '.join(kind.dtypes)}, not {dtype}"


def default_questions_path() -> Path:
    """Spec-Bench's questions as laid out beside a samchat checkout (../shared/data/...)."""
    rel = Path("shared/data/spec_bench/question.jsonl")
    here = Path(__file__).resolve()
    for base in [Path.cwd(), *Path.cwd().parents, *here.parents]:
        for candidate in (base / rel, base.parent / rel):
            if candidate.is_file():
                return candidate
    raise SamchatError(
        "no Spec-Bench questions found next to this checkout; pass --questions PATH "
        "(JSONL with question_id, category, turns)"
    )


def load_questions(path: Path) -> list[Question]:
    if not path.is_file():
        raise SamchatError(f"questions file {path} does not exist; pass --questions PATH")
    questions: list[Question] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            turns = tuple(str(t) for t in row["turns"])
            questions.append(Question(str(row["question_id"]), str(row["category"]), turns))
        except (ValueError, KeyError, TypeError) as exc:
            raise SamchatError(
                f"{path}:{number} is not a Spec-Bench question ({exc}); each line needs "
                "question_id, category and turns"
            ) from exc
    if not questions:
        raise SamchatError(f"{path} holds no questions")
    return questions


def pick(questions: Sequence[Question], per_category: int, skip: int = 0) -> list[Question]:
    """The questions per_category at a time, after `skip` per category (the warm-up ones)."""
    seen: dict[str, int] = {}
    chosen: list[Question] = []
    for q in questions:
        n = seen.get(q.category, 0)
        seen[q.category] = n + 1
        if skip <= n < skip + per_category:
            chosen.append(q)
    return chosen


def _parse_setup(prefix: str, name: str, torch_dtype: str) -> str:
    """The configuration label that ENGINE[/DTYPE] names (in method `name`)."""
    from samchat.models.device import DTYPES

    engine, slash, dtype = prefix.partition("/")
    if engine not in BENCH_ENGINES:
        raise SamchatError(
            f"unknown engine {engine!r} in method {name}; use {' or '.join(BENCH_ENGINES)} "
            f"({SYNTAX}; a bare METHOD runs on the default engine)"
        )
    kind = engine_kind(engine)
    if not kind.dtypes:
        if slash:
            raise SamchatError(
                f"method {name}: {dtype_problem(engine, dtype)}; write "
                f"{kind.name}:{split_key(name)[1]}"
            )
        return kind.name
    if slash and dtype not in DTYPES:
        raise SamchatError(
            f"unknown dtype {dtype!r} in method {name}; use one of {', '.join(DTYPES)}"
        )
    if not slash:  # --dtype, where this engine takes it (torch's int4 is flat/int4)
        dtype = "auto" if dtype_problem(engine, torch_dtype) else torch_dtype
    problem = dtype_problem(engine, dtype) if dtype != "auto" else None
    if problem:
        raise SamchatError(f"method {name}: {problem}")
    return setup_label(kind.name, dtype)


def _qualify(text: str, default: str, torch_dtype: str) -> list[str]:
    """The method keys (CONFIGURATION:METHOD) of a comma-separated list, in its order."""
    keys: list[str] = []
    unknown: list[str] = []
    for name in (m.strip() for m in text.split(",")):
        if not name:
            continue
        prefix, colon, method = name.partition(":")
        if not colon:
            prefix, method = "", name
        label = _parse_setup(prefix, name, torch_dtype) if colon else default
        if method not in ALL_METHODS:
            unknown.append(name)
        kind = engine_kind(label.partition("/")[0])
        if method == "pld" and not (kind.torch_options or kind.native_gguf):
            # pld is transformers' or llama-cpp-python's own prompt lookup: neither runs on
            # this engine, so a bare pld (the default list's) is left out, a named one refused.
            if colon:
                raise SamchatError(f"method {name}: the {kind.label} engine has no pld baseline")
            continue
        keys.append(f"{label}:{method}")
    if unknown or not keys:
        raise SamchatError(
            f"unknown method(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {','.join(ALL_METHODS)} ({SYNTAX})"
        )
    return keys


def parse_methods(text: str, default: str, torch_dtype: str = "auto") -> tuple[str, ...]:
    """Method keys grouped by configuration (in the order they first appear), each group led
    by its plain decoding: the yardstick, always run. `default` is the configuration of bare
    names (a label: an engine's name, with its dtype: torch/bfloat16, flat/int4); `torch_dtype`
    the dtype of `ENGINE:` names (--dtype), where that engine takes it."""
    groups: dict[str, list[str]] = {}
    for key in _qualify(text, default, torch_dtype):
        label = split_key(key)[0]
        groups.setdefault(label, [f"{label}:plain"]).append(key)
    return tuple(dict.fromkeys(key for keys in groups.values() for key in keys))


def warm_plan(
    methods: tuple[str, ...], warm_arg: str | None, default: str, torch_dtype: str = "auto"
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The methods evaluated after the warm-up (in --methods order) and the plain rows reused
    from before it: a configuration's plain runs again only when --warm-methods names it, or is
    not given (plain decoding reads no index)."""
    if not warm_arg:
        return methods, ()
    named = set(_qualify(warm_arg, default, torch_dtype))
    warm = set(parse_methods(warm_arg, default, torch_dtype))
    if not warm <= set(methods):
        raise SamchatError("--warm-methods must be a subset of --methods")
    evaluated = tuple(m for m in methods if m in warm)
    reused = tuple(m for m in evaluated if split_key(m)[1] == "plain" and m not in named)
    return evaluated, reused


def default_setup(spec: ModelSpec) -> str:
    """The configuration that bare method names run on: what --engine (or auto) picks for the
    model, with --dtype for torch."""
    from samchat.models.loader import choose_engine

    kind = engine_kind(choose_engine(spec))
    return setup_label(kind.name, spec.dtype if kind.dtypes else "auto")


def setup_spec(base: ModelSpec, label: str) -> ModelSpec:
    """What to load for a configuration: the command line's model, this engine and dtype
    (llama.cpp takes the file's own types: no dtype, no quantization)."""
    engine, _, dtype = label.partition("/")
    kind = engine_kind(engine)
    if not kind.dtypes:
        return replace(base, engine=kind.name, dtype="auto", quantize=None)
    return replace(base, engine=kind.name, dtype=dtype or "auto")


def method_order(methods: Sequence[str], question: int, pass_index: int) -> list[str]:
    """The order the methods answer a question in: rotated per question and per pass, so that
    over len(methods) passes each method answers each question once in each slot (whatever a
    slot costs, such as following another engine, no method always pays it)."""
    shift = (question + pass_index) % len(methods)
    return [*methods[shift:], *methods[:shift]]


class DecodeBench:
    """Holds one loaded model per configuration, one chat session per method, a private static
    index per tokenizer (configurations whose tokenizers match share one) and, for
    `llamacpp:pld`, one llama-cpp-python Llama with its prompt lookup draft model."""

    def __init__(
        self,
        models: Mapping[str, LoadedModel],
        methods: tuple[str, ...],
        max_new_tokens: int,
        index_dir: Path | None = None,
        progress: Progress | None = None,
        max_draft: int = 0,
        adaptive: bool = True,
        cost_curve: CostCurve | None = None,
    ) -> None:
        """cost_curve: a fixed CostCurve every session plans with (None: each measures its
        own)."""
        from samchat.decoding import SamplingParams

        missing = sorted({split_key(m)[0] for m in methods} - set(models))
        if missing:
            raise ValueError(f"no model loaded for {', '.join(missing)}")
        self.models = dict(models)  # configuration label -> LoadedModel
        self.methods = methods
        self.say = progress or (lambda _msg: None)
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
        self._tmp = tempfile.TemporaryDirectory(prefix="samchat-bench-")
        base = index_dir or Path(self._tmp.name) / "index"
        self._indexes: dict[tuple[str, int], StaticIndex] = {}
        self.index_of = {label: self._open_index(lm, base) for label, lm in self.models.items()}
        self.sessions: dict[str, ChatSession] = {}
        self._llamas: dict[str, PldLlama] = {}  # llamacpp configuration -> its PLD Llama
        self._config = (max_draft, adaptive, cost_curve)
        try:
            self.fresh_sessions()
            for m in methods:
                label, method = split_key(m)
                lm = self.models[label]
                # llama-cpp-python's own prompt lookup, on the same GGUF file
                native = lm.kind.native_gguf
                if method == "pld" and native and label not in self._llamas:
                    self._llamas[label] = llama_pld(lm)
        except BaseException:  # a Ctrl-C too: closed, then re-raised
            self.close()
            raise
        self._doc = 0
        self.store: Store | None = None  # the private store of --corpus documents
        self.rag = False  # retrieve from it before each question (--rag)
        self._retrieved: dict[str, list[Source]] = {}

    def fresh_sessions(self) -> None:
        """A new chat session per method: an empty conversation and Token Recycling table,
        the same static index; measured curves stay (cached per model and machine)."""
        from samchat.decoding import ChatSession, DecodingConfig

        max_draft, adaptive, cost_curve = self._config
        for m in self.methods:
            label, method = split_key(m)
            if method == "pld":
                continue
            config = DecodingConfig(
                method=named(method, METHODS), max_draft=max_draft, adaptive=adaptive
            )
            self.sessions[m] = ChatSession(
                self.models[label],
                config,
                static_index=self.index_of[label],
                cost_curve=cost_curve,
            )

    def load_corpus(self, directory: Path) -> ImportSummary:
        """Import `directory` into a private store and every static index (as `samchat import`
        does for the user's), for drafting and, with `rag`, retrieval. Returns the summary."""
        from samchat.corpus.importer import import_paths
        from samchat.store import Store

        if self.store is None:
            self.store = Store.open(Path(self._tmp.name) / "bench.db")
        summary = import_paths(self.store, [directory])
        if not summary.documents:
            raise SamchatError(
                f"--corpus {directory} holds no readable documents "
                f"({len(summary.skipped)} skipped); point it at text, Markdown, HTML or PDF files"
            )
        for label, index in self.index_of.items():
            if index is None or index.has_document(f"doc:{summary.documents[0][1]}"):
                continue  # no index, or one a configuration with the same tokenizer filled
            tokenizer = self.models[label].tokenizer
            for _path, doc_id in summary.documents:
                tokens = tokenizer(self.store.document_text(doc_id))["input_ids"]
                index.add_document(f"doc:{doc_id}", tokens)
            index.flush()
        return summary

    def _with_sources(self, lm: LoadedModel, messages: list[Message]) -> list[Message]:
        """The last user turn with the passages that answer it before it, fitted to the
        context less the reply's room (the same text for every method)."""
        from samchat.corpus.retrieval import fit, retrieve

        assert self.store is not None  # rag retrieves from the --corpus documents
        question = messages[-1]["content"]
        if question not in self._retrieved:
            self._retrieved[question] = retrieve(self.store, question)
        history = messages[:-1]

        def prompt_tokens(content: str) -> int:
            return len(
                render_prompt(lm.tokenizer, [*history, {"role": "user", "content": content}])
            )

        def count(text: str) -> int:
            return len(lm.tokenizer(text, add_special_tokens=False)["input_ids"])

        limit = int(lm.context_limit) - self.params.max_new_tokens
        fitted = fit(
            question,
            self._retrieved[question],
            prompt_tokens=prompt_tokens,
            count=count,
            limit=limit,
        )
        for notice in fitted.notices:
            self.say(notice)
        return [*history, {"role": "user", "content": fitted.content}]

    def _open_index(self, lm: LoadedModel, base: Path) -> StaticIndex | None:
        try:
            from samchat.sam.index import StaticIndex
        except ImportError:
            return None
        separator = lm.eos_ids[0] if lm.eos_ids else 0
        key = (lm.fingerprint, separator)
        if key not in self._indexes:
            directory = base / f"{lm.fingerprint}-{separator}"
            self._indexes[key] = StaticIndex.open(directory, lm.fingerprint, separator)
        return self._indexes[key]

    def close(self) -> None:
        for llm in self._llamas.values():
            llm.close()
        self._llamas.clear()
        for index in self._indexes.values():
            index.close()
        self._indexes.clear()
        if self.store is not None:
            self.store.close()
            self.store = None
        self._tmp.cleanup()

    def prepare(self) -> None:
        """One short untimed reply per method: loads lazy parts and measures the cost curve
        (cached per model and device) before anything is timed."""
        probe = Question("probe", "probe", ("Say hello.",))
        saved = self.params
        self.params = dataclasses.replace(saved, max_new_tokens=4)
        try:
            for method in self.methods:
                self._ask(method, probe, grow_index=False)
        finally:
            self.params = saved

    def warm_chatters(self) -> list[str]:
        """The sessions that chat through the warm-up, one per static index: a sam+tr one
        where there is one, else the configuration's plain."""
        chosen: dict[int, str] = {}
        for key in self.sessions:
            index = id(self.index_of[split_key(key)[0]])
            current = chosen.get(index)
            if current is None or (
                split_key(key)[1] == "sam+tr" and split_key(current)[1] != "sam+tr"
            ):
                chosen[index] = key
        return list(chosen.values())

    def warm_up(self, questions: Sequence[Question]) -> None:
        """Chat through questions like a user's past chats: the index grows from each turn."""
        chatters = self.warm_chatters()
        for i, q in enumerate(questions, 1):
            self.say(f"warm-up {i}/{len(questions)}: {q.category} {q.question_id}")
            for key in chatters:
                self._ask(key, q, grow_index=True)
        for index in self._indexes.values():
            index.flush()

    def run_passes(self, questions: Sequence[Question], passes: int) -> Results:
        """run() `passes` times, each pass from fresh sessions (so each is as cold as the
        first), keeping for each method and question its fastest pass: the machine's noise
        only ever slows a run down. Greedy replies must not change between passes."""
        results = self.run(questions)
        for n in range(2, passes + 1):
            self.say(f"pass {n}/{passes}")
            self.fresh_sessions()
            results.keep_fastest(self.run(questions, n - 1))
        return results

    def run(self, questions: Sequence[Question], pass_index: int = 0) -> Results:
        results = Results(self.methods)
        for i, q in enumerate(questions):
            for method in method_order(self.methods, i, pass_index):
                self.say(f"{i + 1}/{len(questions)} {q.category} {q.question_id}: {method}")
                results.add(method, q, self._ask(method, q, grow_index=False))
        return results

    def _ask(self, key: str, q: Question, grow_index: bool) -> Run:
        label, method = split_key(key)
        lm = self.models[label]
        index = self.index_of[label]
        messages: list[Message] = []
        total = Run(0, 0.0, 0, [])
        for turn in q.turns:
            messages.append({"role": "user", "content": turn})
            if self.rag:
                messages = self._with_sources(lm, messages)
            if method != "pld":
                raw, seconds, steps = self._session(key, lm, messages, total)
            elif label in self._llamas:
                llm = self._llamas[label]
                raw, seconds, steps = llama_pld_reply(llm, lm, messages, self.params.max_new_tokens)
            else:
                raw, seconds, steps = torch_pld(lm, messages, self.params.max_new_tokens)
            ids = _strip_eos(raw, lm.eos_ids)
            text = lm.tokenizer.decode(ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": text})
            total.tokens += len(ids)
            total.seconds += seconds
            total.steps += steps
            total.committed += len(raw)
            total.token_ids.extend(ids)
            if grow_index and index is not None:
                self._doc += 1
                tokens = lm.tokenizer(turn + "\n" + text)["input_ids"]
                index.add_document(f"bench:{self._doc}", tokens)
        return total

    def _session(
        self, key: str, lm: LoadedModel, messages: list[Message], run: Run
    ) -> tuple[list[int], float, int]:
        """One reply; its per-drafter figures are added to `run`."""
        from samchat.decoding import ReplyDone, StepStats, TextDelta

        ids: list[int] = []
        sizes: list[int] = []  # inputs of each verification forward
        steps = 0
        session = self.sessions[key]
        start = time.perf_counter()
        for event in session.generate(messages, self.params):
            if isinstance(event, TextDelta):
                ids.extend(event.token_ids)
            elif isinstance(event, StepStats):
                sizes.append(event.draft_size + 1)
                d = event.drafter
                run.steps_by[d] = run.steps_by.get(d, 0) + 1
                run.committed_by[d] = run.committed_by.get(d, 0) + event.accepted + 1
                run.engine_s_by[d] = run.engine_s_by.get(d, 0.0) + event.engine_s
                host = event.host
                run.host_s_by[d] = run.host_s_by.get(d, 0.0) + host.total
                for part, seconds in host.parts().items():
                    run.host_parts[part] = run.host_parts.get(part, 0.0) + seconds
            elif isinstance(event, ReplyDone):
                run.cost += reply_cost(self._curves[key], event.stats.prompt_tokens, sizes)
                steps = event.stats.steps
                run.decode_seconds += event.stats.seconds
                for source, n in event.stats.accepted_by_drafter.items():
                    run.tokens_by[source] = run.tokens_by.get(source, 0) + n
                if event.finish_reason == "eos":  # the session does not stream the EOS token
                    ids.append(lm.eos_ids[0])
        seconds = time.perf_counter() - start
        return ids, seconds, steps

    @functools.cached_property
    def _curves(self) -> dict[str, CostCurve]:
        """Each session's engine's measured cost curve (what `predicted_vs_plain` prices steps
        with, whatever curve the sessions plan with)."""
        return {key: s.engine.meter.cost_curve() for key, s in self.sessions.items()}

    def engine_details(self) -> dict[str, EngineDetails]:
        """Per configuration: the engine in words (kernels included) and its measured curve."""
        out: dict[str, EngineDetails] = {}
        for key, session in self.sessions.items():
            label = split_key(key)[0]
            if label not in out:
                curve = self._curves[key]
                out[label] = {
                    "engine": session.engine.meter.describe(),
                    "context": curve.context,
                    "relative_cost": curve.to_dict(),
                }
                if curve.long is not None:  # the same after longer contexts
                    out[label]["long"] = curve.long.long_parts()
        return out


def _strip_eos(ids: list[int], eos_ids: Sequence[int]) -> list[int]:
    while ids and ids[-1] in eos_ids:
        ids = ids[:-1]
    return ids
