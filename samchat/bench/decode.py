"""Decoding benchmark on Spec-Bench-format questions: samchat's methods against plain and PLD,
on one or several engine/dtype configurations.

Protocol (as in Spec-Bench): greedy, chat template, each question's turns in order with the second
turn following the method's own first answer; speed = new tokens / wall time per question; a
category's speedup is the ratio of mean speeds. Methods alternate their order per question so
that machine drift spreads evenly over them.

Methods are named ENGINE[/DTYPE]:METHOD (`llamacpp:sam+tr`, `torch/bfloat16:plain`); a bare
METHOD runs on the default configuration (what --engine, or auto, picks for --model). Every
configuration's plain decoding runs too: it is the yardstick of that configuration's methods.
"""

from __future__ import annotations

import functools
import json
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

from samchat.engines.registry import DEFAULT, KINDS, engine_kind
from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.names import METHODS, named

if TYPE_CHECKING:
    from samchat.models.loader import ModelSpec

ALL_METHODS = ("plain", "pld", "sam", "tr", "sam+tr")
BENCH_ENGINES = tuple(kind.name for kind in KINDS)
SYNTAX = "METHOD or ENGINE[/DTYPE]:METHOD"
# llama-cpp-python's prompt lookup decoding (the llama.cpp peer of transformers' PLD)
LLAMA_PLD_TOKENS = 10
LLAMA_PLD_NGRAM = 2  # LlamaPromptLookupDecoding's default
Progress = Callable[[str], None]
# method -> category -> figure: numbers, and per-drafter mappings (accepted_by, mat_by, steps_by)
Table = dict[str, dict[str, dict[str, Any]]]


@dataclass(frozen=True)
class Question:
    question_id: str
    category: str
    turns: tuple[str, ...]


@dataclass
class Run:
    """One method on one question (all its turns)."""

    tokens: int  # reply tokens (end-of-sequence excluded)
    seconds: float
    steps: int  # verification forwards
    token_ids: list[int]
    committed: int = 0  # tokens the forwards produced, end-of-sequence included (for MAT)
    # Per drafter of the step ("plain", "dyn", "tr", "dyn+tr", ...): steps and the tokens they
    # committed; per source of each reply token ("plain" = bonus): tokens.
    steps_by: dict[str, int] = field(default_factory=dict)
    committed_by: dict[str, int] = field(default_factory=dict)
    tokens_by: dict[str, int] = field(default_factory=dict)
    # The forwards' cost on the engine's measured cost curve, in one-token forwards: what the
    # cost model predicts, without the time spent outside forwards.
    cost: float = 0.0
    # Seconds from the end of prefill to the end of each reply (ReplyDone's stats): the part
    # the cost model speaks of. `seconds` also holds the prefill, alike for every method.
    decode_seconds: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _decode_speed(runs: dict[str, Run], qids: list[str]) -> float:
    """Reply tokens per second of decoding (prefill left out) over these questions."""
    chosen = [runs[q] for q in qids if q in runs]
    seconds = sum(r.decode_seconds for r in chosen)
    return sum(r.tokens for r in chosen) / seconds if seconds > 0 else 0.0


def _by_drafter(runs: list[Run]) -> dict[str, dict[str, float]]:
    """accepted_by: each source's share of the reply tokens; mat_by: tokens per step of each
    step kind (a drafter, a merged tree, or plain), counting every token a step verified, even
    past a length or stop limit where the overall MAT stops. Empty for methods without steps."""
    tokens: dict[str, int] = {}
    steps: dict[str, int] = {}
    committed: dict[str, int] = {}
    for run in runs:
        for table, part in ((tokens, run.tokens_by), (steps, run.steps_by)):
            for k, v in part.items():
                table[k] = table.get(k, 0) + v
        for k, v in run.committed_by.items():
            committed[k] = committed.get(k, 0) + v
    if not steps:
        return {}
    total = sum(tokens.values())
    return {
        "accepted_by": {k: round(v / total, 3) for k, v in sorted(tokens.items())} if total else {},
        "mat_by": {k: round(committed[k] / n, 3) for k, n in sorted(steps.items())},
        "steps_by": {k: float(n) for k, n in sorted(steps.items())},
    }


def setup_label(engine: str, dtype: str = "auto") -> str:
    """A configuration's name: the engine, and the dtype unless it is auto (torch/bfloat16)."""
    return engine if dtype == "auto" else f"{engine}/{dtype}"


def split_key(key: str) -> tuple[str, str]:
    """A method key's configuration and method: 'torch/bfloat16:sam+tr' -> ('torch/bfloat16',
    'sam+tr')."""
    label, _, method = key.rpartition(":")
    return label, method


def plain_of(key: str) -> str:
    """The key of the plain decoding that `key` is measured against."""
    return f"{split_key(key)[0]}:plain"


@dataclass
class Results:
    """runs[method][question_id] plus each question's category."""

    methods: tuple[str, ...]
    categories: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict[str, Run]] = field(default_factory=dict)
    changed: int = 0  # replies that differed between passes (keep_fastest)

    def add(self, method: str, question: Question, run: Run) -> None:
        self.categories[question.question_id] = question.category
        self.runs.setdefault(method, {})[question.question_id] = run

    def table(self) -> Table:
        """method -> category (and "overall") -> tokens_per_s, speedup_vs_plain (the same
        configuration's plain), speedup_vs_best_plain (the fastest plain of the run), mat,
        identical (to the same configuration's plain) and questions."""
        order = list(dict.fromkeys(self.categories.values()))
        plains = [m for m in self.methods if split_key(m)[1] == "plain"]
        out: Table = {}
        for method in self.methods:
            runs = self.runs.get(method, {})
            plain = self.runs.get(plain_of(method), {})
            rows: dict[str, dict[str, Any]] = {}
            for category in [*order, "overall"]:
                qids = [
                    q
                    for q, c in self.categories.items()
                    if (category == "overall" or c == category) and q in runs
                ]
                if not qids:
                    continue
                speed = mean(runs[q].tokens_per_s for q in qids)
                plain_speed = self._speed(plain, qids)
                best_plain = max(
                    (self._speed(self.runs.get(p, {}), qids) for p in plains), default=0
                )
                steps = sum(runs[q].steps for q in qids)
                committed = sum(runs[q].committed for q in qids)
                by: dict[str, Any] = _by_drafter([runs[q] for q in qids])
                cost = sum(runs[q].cost for q in qids)
                if by and cost > 0:
                    # committed tokens per one-token forward's worth of verification cost
                    by["predicted_vs_plain"] = round(committed / cost, 3)
                decode = _decode_speed(runs, qids)
                plain_decode = _decode_speed(plain, qids)
                if by and decode and plain_decode:
                    # what the cost model's figure is to be compared with (no prefill)
                    by["decode_speedup_vs_plain"] = round(decode / plain_decode, 3)
                rows[category] = {
                    **by,
                    "tokens_per_s": round(speed, 2),
                    "speedup_vs_plain": round(speed / plain_speed, 3) if plain_speed else 0.0,
                    "speedup_vs_best_plain": round(speed / best_plain, 3) if best_plain else 0.0,
                    "mat": round(committed / steps, 3) if steps else 0.0,
                    "identical": sum(
                        1 for q in qids if q in plain and runs[q].token_ids == plain[q].token_ids
                    ),
                    "questions": len(qids),
                }
            out[method] = rows
        return out

    def keep_fastest(self, other: Results) -> None:
        """Per method and question, keep the faster of this run and `other`'s; a reply that
        differs between the two is counted in `changed` (greedy decoding is deterministic)."""
        for method, runs in other.runs.items():
            mine = self.runs.setdefault(method, {})
            for qid, run in runs.items():
                old = mine.get(qid)
                if old is not None and old.token_ids != run.token_ids:
                    self.changed += 1
                if old is None or run.seconds < old.seconds:
                    mine[qid] = run
        self.categories.update(other.categories)

    @staticmethod
    def _speed(runs: dict[str, Run], qids: list[str]) -> float:
        speeds = [runs[q].tokens_per_s for q in qids if q in runs]
        return mean(speeds) if speeds else 0.0


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
    if not kind.torch_options:
        if slash:
            raise SamchatError(
                f"method {name}: {kind.label} runs the GGUF file's own types, so it takes no "
                f"dtype; write {kind.name}:{split_key(name)[1]} (dtypes apply to {DEFAULT.name})"
            )
        return kind.name
    if slash and dtype not in DTYPES:
        raise SamchatError(
            f"unknown dtype {dtype!r} in method {name}; use one of {', '.join(DTYPES)}"
        )
    return setup_label(kind.name, dtype if slash else torch_dtype)


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
    names (a label: an engine's name, with a dtype for torch: torch/bfloat16); `torch_dtype`
    the dtype of `torch:` names (--dtype)."""
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
    return setup_label(kind.name, spec.dtype if kind.torch_options else "auto")


def setup_spec(base: ModelSpec, label: str) -> ModelSpec:
    """What to load for a configuration: the command line's model, this engine and dtype
    (llama.cpp takes the file's own types: no dtype, no quantization)."""
    engine, _, dtype = label.partition("/")
    kind = engine_kind(engine)
    if not kind.torch_options:
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
        models: Mapping[str, Any],
        methods: tuple[str, ...],
        max_new_tokens: int,
        index_dir: Path | None = None,
        progress: Progress | None = None,
        max_draft: int = 0,
        adaptive: bool = True,
        cost_curve: Any = None,
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
        self._indexes: dict[tuple[str, int], Any] = {}
        self.index_of = {label: self._open_index(lm, base) for label, lm in self.models.items()}
        self.sessions: dict[str, Any] = {}
        self._llamas: dict[str, Any] = {}  # llamacpp configuration -> its PLD Llama
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
        except BaseException:
            self.close()
            raise
        self._doc = 0
        self.store: Any = None  # the private store of --corpus documents
        self.rag = False  # retrieve from it before each question (--rag)
        self._retrieved: dict[str, list[Any]] = {}

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

    def load_corpus(self, directory: Path) -> Any:
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

    def _with_sources(self, lm: Any, messages: list[Message]) -> list[Message]:
        """The last user turn with the passages that answer it before it, fitted to the
        context less the reply's room (the same text for every method)."""
        from samchat.corpus.retrieval import fit, retrieve

        question = messages[-1]["content"]
        if question not in self._retrieved:
            self._retrieved[question] = retrieve(self.store, question)
        history = messages[:-1]

        def prompt_tokens(content: str) -> int:
            return len(render(lm.tokenizer, [*history, {"role": "user", "content": content}]))

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

    def _open_index(self, lm: Any, base: Path) -> Any:
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
        saved = self.params.max_new_tokens
        self.params.max_new_tokens = 4
        try:
            for method in self.methods:
                self._ask(method, probe, grow_index=False)
        finally:
            self.params.max_new_tokens = saved

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
                raw, seconds, steps = self._llama_pld(label, messages)
            else:
                raw, seconds, steps = self._torch_pld(lm, messages)
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
        self, key: str, lm: Any, messages: list[Message], run: Run
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
    def _curves(self) -> dict[str, Any]:
        """Each session's engine's measured cost curve (what `predicted_vs_plain` prices steps
        with, whatever curve the sessions plan with)."""
        return {key: s.engine.cost_curve() for key, s in self.sessions.items()}

    def engine_details(self) -> dict[str, dict[str, Any]]:
        """Per configuration: the engine in words (kernels included) and its measured curve."""
        out: dict[str, dict[str, Any]] = {}
        for key, session in self.sessions.items():
            label = split_key(key)[0]
            if label not in out:
                curve = self._curves[key]
                out[label] = {
                    "engine": session.engine.describe(),
                    "context": curve.context,
                    "relative_cost": curve.to_dict(),
                }
                if curve.long is not None:  # the same after longer contexts
                    out[label]["long"] = curve.long.long_parts()
        return out

    def _torch_pld(self, lm: Any, messages: list[Message]) -> tuple[list[int], float, int]:
        """transformers' own prompt lookup decoding on the same model."""
        import torch

        tok = lm.tokenizer
        enc = tok.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        input_ids = enc["input_ids"].to(lm.device)
        calls = [0]

        def count(*_: Any) -> None:
            calls[0] += 1

        hook = lm.model.register_forward_hook(count)
        try:
            start = time.perf_counter()
            with torch.no_grad():
                out = lm.model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_new_tokens=self.params.max_new_tokens,
                    do_sample=False,
                    prompt_lookup_num_tokens=10,
                    max_matching_ngram_size=3,
                    eos_token_id=list(lm.eos_ids),
                    pad_token_id=lm.eos_ids[0],
                )
            seconds = time.perf_counter() - start
        finally:
            hook.remove()
        # PLD drafts from the prompt from the first forward on: every call is a step.
        return out[0, input_ids.shape[1] :].tolist(), seconds, max(calls[0], 1)

    def _llama_pld(self, label: str, messages: list[Message]) -> tuple[list[int], float, int]:
        """llama-cpp-python's prompt lookup decoding, greedy, from the prompt samchat renders.
        Each eval() is one forward (the prompt, then the pending token plus the draft) that
        yields at least one token: every call is a step, as in samchat's count."""
        lm = self.models[label]
        llm = self._llamas[label]
        prompt = render(lm.tokenizer, messages)
        room = int(llm.n_ctx()) - len(prompt)
        if room <= 0:
            raise SamchatError(
                f"a prompt of {len(prompt)} tokens does not fit llama.cpp's context "
                f"({llm.n_ctx()} tokens); lower --max-new-tokens or pick other questions"
            )
        limit = min(self.params.max_new_tokens, room)
        eos = set(lm.eos_ids)
        ids: list[int] = []
        llm.evals = 0
        start = time.perf_counter()
        tokens = llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0)
        try:
            for token in tokens:
                ids.append(int(token))
                if token in eos or len(ids) >= limit:
                    break
        finally:
            tokens.close()
        seconds = time.perf_counter() - start
        return ids, seconds, max(int(llm.evals), 1)


def reply_cost(curve: Any, context: int, sizes: Sequence[int]) -> float:
    """A reply's forwards of `sizes` inputs in one-token forwards, priced as the selector
    priced them: on the curve at the prompt's length."""
    at = curve.at(context)
    return float(sum(at.rel(n) for n in sizes))


def _strip_eos(ids: list[int], eos_ids: Sequence[int]) -> list[int]:
    while ids and ids[-1] in eos_ids:
        ids = ids[:-1]
    return ids


def render(tokenizer: Any, messages: list[Message]) -> list[int]:
    """The prompt ids samchat's ChatSession renders for messages (assistant prompt appended)."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids: list[int] = tokenizer(text, add_special_tokens=False)["input_ids"]
    return ids


def llama_pld_settings() -> dict[str, Any]:
    """How `llamacpp:pld` runs (for the benchmark's metadata)."""
    return {
        "implementation": "llama_cpp.Llama + llama_speculative.LlamaPromptLookupDecoding",
        "num_pred_tokens": LLAMA_PLD_TOKENS,
        "max_ngram_size": LLAMA_PLD_NGRAM,
        "kv_cache": "q8_0 keys and values, flash attention (samchat's llama.cpp short chats)",
        "logits_all": True,
        "sampling": "greedy (temp 0, top_k 1)",
    }


def llama_pld(lm: Any) -> Any:
    """A llama-cpp-python Llama over lm's GGUF file with its prompt lookup draft model, the KV
    cache kept as samchat's llama.cpp engine keeps a short chat's (Q8_0, flash attention),
    its eval() calls counted. logits_all=True: with a draft model Llama keeps every row's
    logits, but sizes its logits buffer by n_batch unless logits_all is given, and then fails
    once a conversation passes n_batch tokens."""
    import llama_cpp
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    from samchat.engines.llamacpp.engine import Q8_0
    from samchat.engines.llamacpp.model import llama, threads

    llama()  # initialised once, llama.cpp's log routed to Python logging

    class CountingLlama(llama_cpp.Llama):  # type: ignore[misc,unused-ignore]  # Any without it
        evals = 0

        def eval(self, tokens: Sequence[int]) -> None:
            self.evals += 1
            super().eval(tokens)

    n = threads()
    return CountingLlama(
        model_path=str(lm.model.path),
        draft_model=LlamaPromptLookupDecoding(
            max_ngram_size=LLAMA_PLD_NGRAM, num_pred_tokens=LLAMA_PLD_TOKENS
        ),
        logits_all=True,
        n_ctx=int(lm.context_limit),
        n_gpu_layers=0,
        n_threads=n,
        n_threads_batch=n,
        flash_attn=True,
        type_k=Q8_0,
        type_v=Q8_0,
        verbose=False,
    )


def format_table(table: Table) -> str:
    """Markdown: the overall row of every method (with the speedup over plain its MAT and step
    sizes predict on the measured cost curve, "cost model", beside the one measured on decoding
    alone, "decoding"), then speed, speedup, MAT and identical replies per category (one column
    per method)."""
    methods = list(table)
    lines = [
        "| method | tok/s | vs plain | vs best plain | MAT | cost model | decoding | identical |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in methods:
        r = table[m].get("overall")
        if r:
            predicted = r.get("predicted_vs_plain")
            decoding = r.get("decode_speedup_vs_plain")
            lines.append(
                f"| {m} | {r['tokens_per_s']:.1f} | {r['speedup_vs_plain']:.2f}x | "
                f"{r['speedup_vs_best_plain']:.2f}x | {r['mat']:.2f} | "
                + (f"{predicted:.2f}x" if predicted else "-")
                + " | "
                + (f"{decoding:.2f}x" if decoding else "-")
                + f" | {r['identical']}/{r['questions']} |"
            )
    categories = [
        c for c in dict.fromkeys(c for rows in table.values() for c in rows) if c != "overall"
    ]
    if not categories:
        return "\n".join(lines)
    lines += [
        "",
        "Per category: tok/s, speedup vs the configuration's plain, MAT, identical/questions.",
        "",
        "| category | " + " | ".join(methods) + " |",
        "|---|" + "---|" * len(methods),
    ]
    for c in categories:
        cells = []
        for m in methods:
            r = table[m].get(c)
            cells.append(
                f"{r['tokens_per_s']:.1f}, {r['speedup_vs_plain']:.2f}x, {r['mat']:.2f}, "
                f"{r['identical']}/{r['questions']}"
                if r
                else "-"
            )
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(table: Table, path: Path, title: str) -> None:
    """A PNG bar chart by category of each method's speedup over its configuration's plain."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in table if split_key(m)[1] != "plain"]
    categories = list(dict.fromkeys(c for rows in table.values() for c in rows))
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(8, len(categories) * 0.9), 4.5))
    for i, m in enumerate(methods):
        xs = [j + i * width for j in range(len(categories))]
        ys = [float(table[m].get(c, {}).get("speedup_vs_plain", 0)) for c in categories]
        ax.bar(xs, ys, width, label=m)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(methods) - 1) / 2 for j in range(len(categories))])
    ax.set_xticklabels(categories, rotation=30, ha="right")
    ax.set_ylabel("speedup over the same configuration's plain")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
