"""The suite's leak guard (tests/conftest.py) fails a test that leaves work running behind it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parents[1]


def run_inner(pytester: pytest.Pytester, body: str) -> pytest.RunResult:
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    helpers = pytester.mkpydir("tests")  # what the conftest imports
    (helpers / "homes.py").write_text((TESTS / "homes.py").read_text())
    pytester.makepyfile(test_inner=body)
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")


def test_a_leaked_thread_fails_the_test(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
import threading

stop = threading.Event()

def test_leaks():
    threading.Thread(target=stop.wait, name="samchat-indexer", daemon=True).start()

def test_next_is_clean():
    stop.set()
""",
    )
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*leaked: thread 'samchat-indexer' still running*"])


def test_an_open_index_fails_the_test_and_is_closed(pytester: pytest.Pytester) -> None:
    result = run_inner(
        pytester,
        """
from samchat.sam.index import StaticIndex, open_indexes

kept = []

def test_leaks(tmp_path):
    kept.append(StaticIndex.open(tmp_path / "index", "fp", 0))

def test_next_sees_it_closed():
    assert open_indexes() == []

def test_closing_is_clean(tmp_path):
    StaticIndex.open(tmp_path / "index", "fp", 0).close()
""",
    )
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*leaked: static index * left open*"])
