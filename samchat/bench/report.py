"""What a decode benchmark run measured, as figures: each method's runs (`Run`), the table of
speed, speedups, MAT and identical replies by category (`Results.table`), the cost model's
prediction (`reply_cost`), and the table as Markdown and as a chart.

A method key is CONFIGURATION:METHOD (`torch/bfloat16:sam+tr`); each is measured against the
same configuration's plain decoding (decode.py parses the names)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from samchat.engines.costs.curve import CostCurve


@dataclass(frozen=True)
class Question:
    """A Spec-Bench question: its turns are asked in order, each after the method's own answer
    to the one before."""

    question_id: str
    category: str
    turns: tuple[str, ...]


class DrafterFigures(TypedDict, total=False):
    """Per drafter of a method's steps, and what the cost model says of them (none for a
    method without steps)."""

    accepted_by: dict[str, float]  # each source's share of the reply tokens
    mat_by: dict[str, float]  # tokens per step of each step kind
    steps_by: dict[str, float]
    predicted_vs_plain: float  # committed tokens per one-token forward's worth of cost
    decode_speedup_vs_plain: float  # on decoding alone (no prefill)
    achieved_of_predicted: float  # decode_speedup_vs_plain / predicted_vs_plain
    # The cost model as the selector prices a step (policy/hostcost.py): its forward on the
    # curve plus the host's seconds it took, against a plain step's forward and host seconds.
    priced_vs_plain: float
    achieved_of_priced: float  # decode_speedup_vs_plain / priced_vs_plain
    # Milliseconds per step: in the engine's forward, on the host (the rest of the step), the
    # host's by part (events.HostTimes) and both by step kind.
    engine_ms_per_step: float
    host_ms_per_step: float
    host_ms_by_part: dict[str, float]
    engine_ms_by: dict[str, float]
    host_ms_by: dict[str, float]


class Figures(DrafterFigures):
    """One method on one category (or "overall")."""

    tokens_per_s: float
    speedup_vs_plain: float
    speedup_vs_best_plain: float
    mat: float
    identical: int  # replies equal to the same configuration's plain
    questions: int


# method -> category -> its figures
Table = dict[str, dict[str, Figures]]


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
    # Per step kind: seconds in the engine's forward and on the host; the host's by part.
    engine_s_by: dict[str, float] = field(default_factory=dict)
    host_s_by: dict[str, float] = field(default_factory=dict)
    host_parts: dict[str, float] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def _decode_speed(runs: dict[str, Run], qids: list[str]) -> float:
    """Reply tokens per second of decoding (prefill left out) over these questions."""
    chosen = [runs[q] for q in qids if q in runs]
    seconds = sum(r.decode_seconds for r in chosen)
    return sum(r.tokens for r in chosen) / seconds if seconds > 0 else 0.0


def _by_drafter(runs: list[Run]) -> DrafterFigures:
    """accepted_by: each source's share of the reply tokens; mat_by: tokens per step of each
    step kind (a drafter, a merged tree, or plain), counting every token a step verified, even
    past a length or stop limit where the overall MAT stops. Empty for methods without steps."""
    tokens: dict[str, int] = {}
    steps: dict[str, int] = {}
    committed: dict[str, int] = {}
    engine: dict[str, float] = {}
    host: dict[str, float] = {}
    parts: dict[str, float] = {}
    for run in runs:
        for table, part in ((tokens, run.tokens_by), (steps, run.steps_by)):
            for k, v in part.items():
                table[k] = table.get(k, 0) + v
        for k, v in run.committed_by.items():
            committed[k] = committed.get(k, 0) + v
        for sums, seconds in ((engine, run.engine_s_by), (host, run.host_s_by)):
            for k, s in seconds.items():
                sums[k] = sums.get(k, 0.0) + s
        for k, s in run.host_parts.items():
            parts[k] = parts.get(k, 0.0) + s
    if not steps:
        return {}
    total = sum(tokens.values())
    n_steps = sum(steps.values())
    figures: DrafterFigures = {
        "accepted_by": {k: round(v / total, 3) for k, v in sorted(tokens.items())} if total else {},
        "mat_by": {k: round(committed[k] / n, 3) for k, n in sorted(steps.items())},
        "steps_by": {k: float(n) for k, n in sorted(steps.items())},
    }
    if engine or host:
        figures["engine_ms_per_step"] = _ms(sum(engine.values()), n_steps)
        figures["host_ms_per_step"] = _ms(sum(host.values()), n_steps)
        figures["host_ms_by_part"] = {k: _ms(s, n_steps) for k, s in parts.items()}
        figures["engine_ms_by"] = {k: _ms(engine.get(k, 0.0), n) for k, n in sorted(steps.items())}
        figures["host_ms_by"] = {k: _ms(host.get(k, 0.0), n) for k, n in sorted(steps.items())}
    return figures


def _ms(seconds: float, steps: int) -> float:
    """Milliseconds per step."""
    return round(1000.0 * seconds / steps, 4) if steps else 0.0


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
            rows: dict[str, Figures] = {}
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
                by = _by_drafter([runs[q] for q in qids])
                cost = sum(runs[q].cost for q in qids)
                if by and cost > 0:
                    # committed tokens per one-token forward's worth of verification cost
                    by["predicted_vs_plain"] = round(committed / cost, 3)
                decode = _decode_speed(runs, qids)
                plain_decode = _decode_speed(plain, qids)
                if by and decode and plain_decode:
                    # what the cost model's figure is to be compared with (no prefill)
                    by["decode_speedup_vs_plain"] = round(decode / plain_decode, 3)
                    predicted = by.get("predicted_vs_plain")
                    if predicted:
                        achieved = decode / plain_decode / predicted
                        by["achieved_of_predicted"] = round(achieved, 3)
                    priced = _priced(
                        [runs[q] for q in qids], [plain[q] for q in qids if q in plain]
                    )
                    if priced:
                        by["priced_vs_plain"] = round(priced, 3)
                        by["achieved_of_priced"] = round(decode / plain_decode / priced, 3)
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


def _priced(runs: list[Run], plain: list[Run]) -> float | None:
    """The speedup over plain the cost model predicts with the host's time priced as the
    selector prices it: each step costs its forward on the curve (in the plain run's seconds per
    forward) and the host seconds it took; a plain step, the plain run's forward and host
    seconds. None without timed plain steps."""
    steps = sum(r.steps for r in plain)
    forward = sum(s for r in plain for s in r.engine_s_by.values())
    if steps == 0 or forward <= 0:
        return None
    t1 = forward / steps
    h1 = sum(s for r in plain for s in r.host_s_by.values()) / steps
    cost = sum(r.cost for r in runs) * t1 + sum(s for r in runs for s in r.host_s_by.values())
    committed = sum(r.committed for r in runs)
    return committed * (t1 + h1) / cost if cost > 0 else None


def reply_cost(curve: CostCurve, context: int, sizes: Sequence[int]) -> float:
    """A reply's forwards of `sizes` inputs in one-token forwards, priced as the selector
    priced them: on the curve at the prompt's length."""
    at = curve.at(context)
    return float(sum(at.rel(n) for n in sizes))


def _times(v: float | None) -> str:
    return f"{v:.2f}x" if v else "-"


def _share(v: float | None) -> str:
    return f"{100 * v:.0f}%" if v else "-"


def format_table(table: Table) -> str:
    """Markdown: the overall row of every method (with the speedup over plain its MAT and step
    sizes predict on the measured cost curve, "cost model", and with the host's seconds priced
    too, "with host", beside the one measured on decoding alone, "decoding", and what share of
    each that is), then speed, speedup, MAT and identical replies per category (one column per
    method)."""
    methods = list(table)
    lines = [
        "| method | tok/s | vs plain | vs best plain | MAT | cost model | with host | decoding "
        "| of prediction | of priced | identical |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in methods:
        r = table[m].get("overall")
        if r:
            cells = [
                _times(r.get("predicted_vs_plain")),
                _times(r.get("priced_vs_plain")),
                _times(r.get("decode_speedup_vs_plain")),
                _share(r.get("achieved_of_predicted")),
                _share(r.get("achieved_of_priced")),
            ]
            lines.append(
                f"| {m} | {r['tokens_per_s']:.1f} | {r['speedup_vs_plain']:.2f}x | "
                f"{r['speedup_vs_best_plain']:.2f}x | {r['mat']:.2f} | "
                + " | ".join(cells)
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


def format_host(table: Table) -> str:
    """Markdown: each method's milliseconds per step in the engine's forward and on the host,
    the host's by part, then both by step kind (empty where no method timed its steps)."""
    methods = [m for m in table if "host_ms_per_step" in table[m].get("overall", {})]
    if not methods:
        return ""
    parts = list(dict.fromkeys(p for m in methods for p in table[m]["overall"]["host_ms_by_part"]))
    lines = [
        "Milliseconds per step: the engine's forward, the host's rest, and the host's by part.",
        "",
        "| method | steps | engine | host | " + " | ".join(parts) + " |",
        "|---|---:|---:|---:|" + "---:|" * len(parts),
    ]
    for m in methods:
        r = table[m]["overall"]
        by_part = r["host_ms_by_part"]
        lines.append(
            f"| {m} | {sum(r['steps_by'].values()):.0f} | {r['engine_ms_per_step']:.3f} | "
            f"{r['host_ms_per_step']:.3f} | "
            + " | ".join(f"{by_part.get(p, 0.0):.3f}" for p in parts)
            + " |"
        )
    lines += ["", "| method | step kind | steps | engine | host |", "|---|---|---:|---:|---:|"]
    for m in methods:
        r = table[m]["overall"]
        for kind, n in r["steps_by"].items():
            lines.append(
                f"| {m} | {kind} | {n:.0f} | {r['engine_ms_by'].get(kind, 0.0):.3f} | "
                f"{r['host_ms_by'].get(kind, 0.0):.3f} |"
            )
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
        ys = [float(table[m][c]["speedup_vs_plain"]) if c in table[m] else 0.0 for c in categories]
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
