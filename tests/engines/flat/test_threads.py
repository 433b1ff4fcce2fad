"""The flat engine's thread count, chosen while it runs (threads.py), on a simulated machine
whose forwards' times change with its load (on the real engine a switch must never change a
token: test_int4.py)."""

from __future__ import annotations

import random

from samchat.engines.flat.threads import LONGEST_WAIT, LOOK, TRIAL, ThreadChoice

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


class _Cores:
    """The simulated machine's idle cores as idle.py would see them, set by the test."""

    def __init__(self) -> None:
        self.idle: float | None = 0.0
        self.looks = 0

    def look(self) -> float | None:
        self.looks += 1
        return self.idle


def _after_a_long_load(choice: ThreadChoice, rng: random.Random) -> None:
    """Quiet, then loaded long enough for the losing trials to wait their longest."""
    _run(choice, QUIET, 200, rng)
    _run(choice, LOADED, 3000, rng)
    assert choice.current == 1 and choice._wait == LONGEST_WAIT


def test_a_core_gone_idle_brings_every_core_back_at_once_after_a_long_load() -> None:
    cores = _Cores()
    rng = random.Random(5)
    choice = ThreadChoice(2, idle=cores.look)
    _after_a_long_load(choice, rng)
    cores.idle = 1.0
    used = _run(choice, QUIET, 100, rng)
    assert choice.current == 2 and used.index(2) <= LOOK + 1
    # Without the look, the machine quiet again stays on one thread through the longest wait.
    rng = random.Random(5)
    blind = ThreadChoice(2)
    _after_a_long_load(blind, rng)
    used = _run(blind, QUIET, 300, rng)
    assert blind.current == 1 and used.count(2) == 0


def test_idle_cores_under_a_load_that_still_slows_every_core_bring_one_trial() -> None:
    # A load the look cannot see (idle cores, yet two threads lose): one trial on the look's
    # word, then the doubling waits as before.
    cores = _Cores()
    rng = random.Random(6)
    choice = ThreadChoice(2, idle=cores.look)
    _run(choice, QUIET, 200, rng)
    cores.idle = 0.9
    used = _run(choice, LOADED, 1500, rng)
    blind = _run(ThreadChoice(2), LOADED, 1500, random.Random(6))
    assert choice.current == 1 and cores.looks > 50
    assert used.count(2) <= blind.count(2) + TRIAL + 5


def test_no_look_where_idle_cores_are_unknown_or_every_core_runs() -> None:
    cores = _Cores()
    cores.idle = None
    rng = random.Random(7)
    choice = ThreadChoice(2, idle=cores.look)
    _run(choice, QUIET, 500, rng)
    assert cores.looks == 0  # on every core: nothing to look for
    _after_a_long_load(choice, rng)
    used = _run(choice, QUIET, 300, rng)
    assert cores.looks > 0 and choice.current == 1 and used.count(2) == 0
