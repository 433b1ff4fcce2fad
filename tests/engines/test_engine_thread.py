"""The engine thread: once started, every call runs on one long-lived thread, in order;
results and errors come back to the caller; a call from the engine thread itself, or before it
is started, runs at once where it is made."""

from __future__ import annotations

import threading

import pytest

from samchat.engines.engine_thread import EngineThread


def test_calls_from_many_threads_run_on_one_thread_in_turn() -> None:
    engine = EngineThread("test-engine")
    assert engine.run(threading.get_ident) == threading.get_ident()  # not started: here
    engine.start()
    seen: list[int] = []
    busy = threading.Lock()

    def work(i: int) -> int:
        assert busy.acquire(blocking=False)  # never two calls at once
        try:
            seen.append(threading.get_ident())
            return i * i
        finally:
            busy.release()

    results: dict[int, int] = {}
    callers = [
        threading.Thread(target=lambda i=i: results.__setitem__(i, engine.run(lambda: work(i))))
        for i in range(16)
    ]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    assert results == {i: i * i for i in range(16)}
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()
    # The same thread serves later calls too (OpenMP keeps one pool for it).
    assert engine.run(threading.get_ident) == seen[0]


def test_an_error_comes_back_to_the_caller_and_the_thread_goes_on() -> None:
    engine = EngineThread("test-engine")
    engine.start()

    def fail() -> None:
        raise ValueError("bad input")

    with pytest.raises(ValueError, match="bad input"):
        engine.run(fail)
    assert engine.run(lambda: 7) == 7


def test_a_call_made_on_the_engine_thread_runs_at_once() -> None:
    engine = EngineThread("test-engine")
    engine.start()
    assert engine.run(lambda: engine.run(lambda: "nested")) == "nested"
