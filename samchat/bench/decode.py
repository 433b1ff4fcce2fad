"""Decoding benchmark on Spec-Bench-format questions: samchat's methods against plain and PLD.

Protocol (as in Spec-Bench): greedy, chat template, each question's turns in order with the second
turn following the method's own first answer; speed = new tokens / wall time per question; a
category's speedup is the ratio of mean speeds. Methods alternate their order per question so
that machine drift spreads evenly over them.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

from samchat.errors import SamchatError

ALL_METHODS = ("plain", "pld", "sam", "tr", "sam+tr")
Progress = Callable[[str], None]


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

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Results:
    """runs[method][question_id] plus each question's category."""

    methods: tuple[str, ...]
    categories: dict[str, str] = field(default_factory=dict)
    runs: dict[str, dict[str, Run]] = field(default_factory=dict)

    def add(self, method: str, question: Question, run: Run) -> None:
        self.categories[question.question_id] = question.category
        self.runs.setdefault(method, {})[question.question_id] = run

    def table(self) -> dict[str, dict[str, dict[str, float | int]]]:
        """method -> category (and "overall") -> tokens_per_s, speedup_vs_plain, mat, identical."""
        order = list(dict.fromkeys(self.categories.values()))
        out: dict[str, dict[str, dict[str, float | int]]] = {}
        plain = self.runs.get("plain", {})
        for method in self.methods:
            runs = self.runs.get(method, {})
            rows: dict[str, dict[str, float | int]] = {}
            for category in [*order, "overall"]:
                qids = [
                    q
                    for q, c in self.categories.items()
                    if (category == "overall" or c == category) and q in runs
                ]
                if not qids:
                    continue
                speed = mean(runs[q].tokens_per_s for q in qids)
                plain_speed = (
                    mean(plain[q].tokens_per_s for q in qids if q in plain) if plain else 0
                )
                steps = sum(runs[q].steps for q in qids)
                committed = sum(runs[q].committed for q in qids)
                rows[category] = {
                    "tokens_per_s": round(speed, 2),
                    "speedup_vs_plain": round(speed / plain_speed, 3) if plain_speed else 0.0,
                    "mat": round(committed / steps, 3) if steps else 0.0,
                    "identical": sum(
                        1 for q in qids if q in plain and runs[q].token_ids == plain[q].token_ids
                    ),
                    "questions": len(qids),
                }
            out[method] = rows
        return out


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


def parse_methods(text: str) -> tuple[str, ...]:
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown or not methods:
        raise SamchatError(
            f"unknown method(s) {', '.join(unknown) or '(none)'}; "
            f"choose from {','.join(ALL_METHODS)}"
        )
    return tuple(dict.fromkeys(("plain", *methods)))  # plain is the yardstick, always run


def warm_plan(methods: tuple[str, ...], warm_arg: str | None) -> tuple[tuple[str, ...], bool]:
    """The methods evaluated after the warm-up (plain first) and whether plain runs again:
    only when --warm-methods names it, or is not given (plain decoding reads no index)."""
    if not warm_arg:
        return methods, True
    warm = parse_methods(warm_arg)
    if not set(warm) <= set(methods):
        raise SamchatError("--warm-methods must be a subset of --methods")
    named = {m.strip() for m in warm_arg.split(",")}
    return warm, "plain" in named


class DecodeBench:
    """Holds the model, one chat session per method and a private static index."""

    def __init__(
        self,
        lm: Any,
        methods: tuple[str, ...],
        max_new_tokens: int,
        index_dir: Path | None = None,
        progress: Progress | None = None,
        max_draft: int = 0,
        adaptive: bool = True,
    ) -> None:
        from samchat.decoding import ChatSession, DecodingConfig, SamplingParams

        self.lm = lm
        self.methods = methods
        self.say = progress or (lambda _msg: None)
        self.params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
        self._tmp = tempfile.TemporaryDirectory(prefix="samchat-bench-")
        self.index = self._open_index(index_dir or Path(self._tmp.name) / "index")
        self.sessions = {
            m: ChatSession(
                lm,
                DecodingConfig(method=m, max_draft=max_draft, adaptive=adaptive),
                static_index=self.index,
            )
            for m in methods
            if m != "pld"
        }
        self._doc = 0

    def _open_index(self, directory: Path) -> Any:
        try:
            from samchat.sam.index import StaticIndex
        except ImportError:
            return None
        separator = self.lm.eos_ids[0] if self.lm.eos_ids else 0
        return StaticIndex.open(directory, self.lm.fingerprint, separator)

    def close(self) -> None:
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

    def warm_up(self, questions: Sequence[Question]) -> None:
        """Chat through questions like a user's past chats: the index grows from each turn."""
        for i, q in enumerate(questions, 1):
            self.say(f"warm-up {i}/{len(questions)}: {q.category} {q.question_id}")
            self._ask("sam+tr" if "sam+tr" in self.sessions else "plain", q, grow_index=True)
        if self.index is not None:
            self.index.flush()

    def run(self, questions: Sequence[Question]) -> Results:
        results = Results(self.methods)
        for i, q in enumerate(questions):
            shift = i % len(self.methods)
            order = self.methods[shift:] + self.methods[:shift]
            for method in order:
                self.say(f"{i + 1}/{len(questions)} {q.category} {q.question_id}: {method}")
                results.add(method, q, self._ask(method, q, grow_index=False))
        return results

    def _ask(self, method: str, q: Question, grow_index: bool) -> Run:
        messages: list[dict[str, str]] = []
        total = Run(0, 0.0, 0, [])
        for turn in q.turns:
            messages.append({"role": "user", "content": turn})
            raw, seconds, steps = (
                self._pld(messages) if method == "pld" else self._session(method, messages)
            )
            ids = self._strip_eos(raw)
            text = self.lm.tokenizer.decode(ids, skip_special_tokens=True)
            messages.append({"role": "assistant", "content": text})
            total.tokens += len(ids)
            total.seconds += seconds
            total.steps += steps
            total.committed += len(raw)
            total.token_ids.extend(ids)
            if grow_index and self.index is not None:
                self._doc += 1
                tokens = self.lm.tokenizer(turn + "\n" + text)["input_ids"]
                self.index.add_document(f"bench:{self._doc}", tokens)
        return total

    def _strip_eos(self, ids: list[int]) -> list[int]:
        while ids and ids[-1] in self.lm.eos_ids:
            ids = ids[:-1]
        return ids

    def _session(self, method: str, messages: list[dict[str, str]]) -> tuple[list[int], float, int]:
        from samchat.decoding import ReplyDone, TextDelta

        ids: list[int] = []
        steps = 0
        start = time.perf_counter()
        for event in self.sessions[method].generate(messages, self.params):
            if isinstance(event, TextDelta):
                ids.extend(event.token_ids)
            elif isinstance(event, ReplyDone):
                steps = event.stats.steps
                if event.finish_reason == "eos":  # the session does not stream the EOS token
                    ids.append(self.lm.eos_ids[0])
        seconds = time.perf_counter() - start
        return ids, seconds, steps

    def _pld(self, messages: list[dict[str, str]]) -> tuple[list[int], float, int]:
        """transformers' own prompt lookup decoding on the same model."""
        import torch

        tok = self.lm.tokenizer
        enc = tok.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        input_ids = enc["input_ids"].to(self.lm.device)
        calls = [0]

        def count(*_: Any) -> None:
            calls[0] += 1

        hook = self.lm.model.register_forward_hook(count)
        try:
            start = time.perf_counter()
            with torch.no_grad():
                out = self.lm.model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    max_new_tokens=self.params.max_new_tokens,
                    do_sample=False,
                    prompt_lookup_num_tokens=10,
                    max_matching_ngram_size=3,
                    eos_token_id=list(self.lm.eos_ids),
                    pad_token_id=self.lm.eos_ids[0],
                )
            seconds = time.perf_counter() - start
        finally:
            hook.remove()
        # PLD drafts from the prompt from the first forward on: every call is a step.
        return out[0, input_ids.shape[1] :].tolist(), seconds, max(calls[0], 1)


def format_table(table: dict[str, dict[str, dict[str, float | int]]]) -> str:
    """A Markdown table: one row per category, speedup and MAT per method."""
    methods = list(table)
    categories = list(dict.fromkeys(c for rows in table.values() for c in rows))
    head = "| category | " + " | ".join(f"{m} tok/s, x, MAT, same" for m in methods) + " |"
    lines = [head, "|" + "---|" * (len(methods) + 1)]
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
        name = f"**{c}**" if c == "overall" else c
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(table: dict[str, dict[str, dict[str, float | int]]], path: Path, title: str) -> None:
    """A PNG bar chart of speedup over plain by category."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = [m for m in table if m != "plain"]
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
    ax.set_ylabel("speedup over plain decoding")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
