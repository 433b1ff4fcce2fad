"""The flat engine's thread count, chosen while it runs (threads.py), on a simulated machine
whose forwards' times change with its load (on the real engine a switch must never change a
token: test_int4.py)."""

from __future__ import annotations

import random

from samchat.engines.flat.threads import LONGEST_WAIT, TRIAL, ThreadChoice

# Seconds of a one-row forward by thread count, from the 1B shape's step on two cores, quiet
# and with another process busy on one core (docs/benchmarks.md, issue 61's item 7).
QUIET = {2: 0.025, 1: 0.045}
LOADED = {2: 0.062, 1: 0.045}


def _run(
    choice: ThreadChoice,
    machine: dict[int, float],
    forwards: int,
    rng: random.Random,
    rows: tuple[int, ...] = (1,),
) -> list[int]:
    """`forwards` forwards on the simulated machine (times within 10% of its figures, more
    rows a little slower); the thread count each ran on."""
    used = []
    for _ in range(forwards):
        n = rng.choice(rows)
        threads = choice.pick(n)
        choice.timed(threads, n, machine[threads] * (1 + 0.08 * n) * rng.uniform(0.9, 1.1))
        used.append(threads)
    return used


def test_a_quiet_machine_keeps_every_core_and_tries_the_other_count_rarely() -> None:
    choice = ThreadChoice(2)
    used = _run(choice, QUIET, 3000, random.Random(1))
    assert choice.current == 2 and choice.switches == 0
    assert used.count(1) <= 0.01 * len(used)  # losing trials wait twice as long each time
    assert used.count(1) >= TRIAL  # but it did look


def test_a_busy_core_brings_one_thread_fewer_soon_and_every_core_once_quiet_again() -> None:
    rng = random.Random(2)
    choice = ThreadChoice(2)
    _run(choice, QUIET, 2000, rng)  # long enough for the trials to wait their longest
    used = _run(choice, LOADED, 200, rng)
    # The kept count slowing down brings a trial at once; then only trials run on two.
    assert choice.current == 1 and used.index(1) < 5
    assert used[-100:].count(2) <= 2 * TRIAL
    used = _run(choice, QUIET, LONGEST_WAIT + 2 * TRIAL, rng)
    assert choice.current == 2 and used[-20:].count(1) <= TRIAL


def test_forwards_of_mixed_rows_are_compared_row_count_by_row_count() -> None:
    rng = random.Random(3)
    choice = ThreadChoice(2)
    _run(choice, QUIET, 500, rng, rows=(1, 2, 4, 8))
    assert choice.current == 2
    _run(choice, LOADED, 300, rng, rows=(1, 2, 4, 8))
    assert choice.current == 1
    # Prompts read in pieces are neither timed nor run on the other count.
    assert choice.pick(512) == 1 and choice.recent.keys() <= {1, 2, 4, 8}


def test_one_core_or_a_given_count_runs_on_it_alone() -> None:
    for choice in (ThreadChoice(1), ThreadChoice(4, adaptive=False)):
        used = _run(choice, {1: 0.01, 3: 0.001, 4: 0.02}, 500, random.Random(4))
        assert set(used) == {choice.most} and choice.switches == 0
