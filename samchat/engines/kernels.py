"""Which kernels an engine runs for a forward of n new tokens (a plan the cost curve carries),
chosen by timing them on this machine. The torch engine has the candidates:

Candidates (fastpath.py): the model's own code ("stock"); `W @ hᵀ` for every linear and the
output projection ("wht"); and that plus grouped-query attention packed by group ("wht+gqa").
Which is fastest depends on the CPU (AMD or Intel, AVX-512, AMX), the BLAS build and the row
count, so a constant chosen on one machine is wrong on another. measure_kernels() times each
candidate at each size, interleaved round by round, and keeps the fastest; plain steps (one
row) use the winner for one row, so speedups are against the fastest plain decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KERNELS = ("stock", "wht", "wht+gqa")
_LABELS = {"stock": "the model's own", "wht": "W @ hᵀ", "wht+gqa": "W @ hᵀ + packed GQA"}
# A candidate must beat the stock kernels by this much to be chosen: a tie in the timings is
# noise, and the model's own code is what every other tool runs.
_MARGIN = 0.98
# After this many timed rounds, candidates slower than the best by more than _PRUNE drop out.
_PRUNE_AFTER = 1
_PRUNE = 1.25


@dataclass(frozen=True)
class KernelPlan:
    """kernel name by measured input size; a size between two measured ones takes the next
    larger one's choice, and a larger one the largest's."""

    choice: tuple[tuple[int, str], ...]

    @classmethod
    def of(cls, choice: dict[int, str]) -> KernelPlan:
        bad = {k for k in choice.values() if k not in KERNELS}
        if bad or not choice:
            raise ValueError(f"not a kernel plan: {choice}")
        return cls(tuple(sorted(choice.items())))

    @classmethod
    def only(cls, kernel: str) -> KernelPlan:
        return cls.of({1: kernel})

    def kernel(self, n: int) -> str:
        for size, name in self.choice:
            if n <= size:
                return name
        return self.choice[-1][1]

    def flags(self, n: int) -> tuple[bool, bool]:
        """(W @ hᵀ linears, packed attention) for an input of n tokens."""
        name = self.kernel(n)
        return name != "stock", name == "wht+gqa"

    def to_dict(self) -> dict[str, str]:
        return {str(n): k for n, k in self.choice}

    def describe(self) -> str:
        """e.g. "1 row: W @ hᵀ; 2-8 rows: W @ hᵀ + packed GQA; 12+ rows: the model's own"."""
        runs: list[tuple[int, int, str]] = []  # (first size, last size, kernel)
        lo = 1
        for size, name in self.choice:
            if runs and runs[-1][2] == name:
                runs[-1] = (runs[-1][0], size, name)
            else:
                runs.append((lo, size, name))
            lo = size + 1
        parts = []
        for i, (first, last, name) in enumerate(runs):
            if i + 1 == len(runs):  # larger inputs take the last choice
                span = "all rows" if first == 1 else f"{first}+ rows"
            else:
                span = (
                    "1 row"
                    if last == 1
                    else f"{first}-{last} rows"
                    if first < last
                    else f"{last} rows"
                )
            parts.append(f"{span}: {_LABELS[name]}")
        return "; ".join(parts)


# Today's fixed choice, used until a measurement exists (and by tests that give a cost curve):
# the model's own kernels for one row, W @ hᵀ and packed attention for more.
DEFAULT_PLAN = KernelPlan.of({1: "stock", 2: "wht+gqa"})
STOCK_PLAN = KernelPlan.only("stock")


def measure_kernels(
    run: Callable[[int, str], float],
    sizes: tuple[int, ...],
    candidates: Callable[[int], tuple[str, ...]],
    reps: int = 4,
) -> tuple[KernelPlan, dict[int, float]]:
    """run(n, kernel) times one forward of n inputs on that kernel (seconds). Returns the plan
    and each size's median time on its chosen kernel. Round 0 warms up; rounds interleave
    sizes and kernels, so that bursts of load hit all of them alike."""
    alive = {n: list(candidates(n)) for n in sizes}
    samples: dict[tuple[int, str], list[float]] = {(n, k): [] for n in sizes for k in alive[n]}
    for rnd in range(reps + 1):
        for n in sizes:
            for k in alive[n]:
                dt = run(n, k)
                if rnd > 0:
                    samples[(n, k)].append(dt)
        if rnd == _PRUNE_AFTER:
            for n in sizes:
                fastest = min(_median(samples[(n, k)]) for k in alive[n])
                alive[n] = [
                    k
                    for k in alive[n]
                    if k == "stock" or _median(samples[(n, k)]) <= fastest * _PRUNE
                ]
    choice: dict[int, str] = {}
    times: dict[int, float] = {}
    for n in sizes:
        med = {k: _median(samples[(n, k)]) for k in alive[n]}
        pick = min(med, key=lambda k: med[k])
        if "stock" in med and med[pick] > med["stock"] * _MARGIN:
            pick = "stock"
        choice[n] = pick
        times[n] = med[pick]
    return KernelPlan.of(choice), times


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2]


def plan_from(data: Any) -> KernelPlan | None:
    """A plan from its cached JSON form, or None if it is not one."""
    try:
        return KernelPlan.of({int(n): str(k) for n, k in dict(data).items()})
    except (TypeError, ValueError, AttributeError):
        return None
