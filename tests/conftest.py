"""Shared fixtures. The real default model is loaded once per test session."""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.homes import SHARED_COSTS_ENV, share_costs

# Tests never reach a model hub; the converted default model is shared between runs.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _pin_worker() -> None:
    """Under pytest-xdist, each worker (and every process it starts) gets its own share of the
    cores: torch's and llama.cpp's threads then never contend with the other worker's (OpenMP
    threads spin, so two runs over the same cores each go several times slower)."""
    worker, count = (
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
    )
    if not worker or not count or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    n, i = int(count), int(worker.removeprefix("gw"))
    if len(cpus) < n:
        return
    mine = cpus[i::n]
    os.sched_setaffinity(0, mine)
    os.environ["OMP_NUM_THREADS"] = str(len(mine))  # torch is not imported yet


_pin_worker()


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per core this run may use (psutil would count the machine's)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


if "SAMCHAT_MODEL_CACHE" not in os.environ:
    from platformdirs import user_cache_dir

    os.environ["SAMCHAT_MODEL_CACHE"] = str(Path(user_cache_dir("samchat")) / "models")
# `samchat ask` adds piped stdin to the question: the processes tests start must not inherit
# whatever stdin the test run has (a CI runner's open pipe would make them wait forever).
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)


# Whether the run holds a test other than the all_cores ones, which bring their own curves.
_MEASURE_CURVES = pytest.StashKey[bool]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that takes the real model is a `model` test (`make test-fast` leaves them out)."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if "default_lm" in names or "gguf_lm" in names:
            item.add_marker(pytest.mark.model)


def pytest_collection_finish(session: pytest.Session) -> None:
    needed = any(i.get_closest_marker("all_cores") is None for i in session.items)
    session.config.stash[_MEASURE_CURVES] = needed


@pytest.fixture(scope="session")
def shared_costs(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Path]:
    """One cost-curve cache for the whole run: a curve is measured
    on this machine by the first test that needs it, as a user's first reply would, and read
    by the rest. The default GGUF's llama.cpp curve is the committed default instead (timing
    it takes a minute, and only sizes drafts); a GGUF at another path is still timed at its
    first reply (tests/models/test_models_catalog.py checks that). Tests of the
    measurement itself mark themselves `private_costs`."""
    path = tmp_path_factory.getbasetemp() / "shared-cache" / "costs"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ[SHARED_COSTS_ENV] = str(path)
    from samchat.engines.llamacpp.model import unavailable_reason

    if unavailable_reason() is None:  # without llama.cpp its own tests fail, not every test
        from samchat.engines.costs import CostCurve
        from samchat.engines.costs.cache import save_curve
        from samchat.engines.llamacpp.engine import LlamaCppEngine, curve_digest

        gguf_lm = request.getfixturevalue("gguf_lm")
        save_curve(CostCurve.default("cpu"), path / f"{curve_digest(gguf_lm)}.json")
        # Read once through an engine: the model's own memo has it too, so that engines
        # without a cache (the benches') take it as well.
        engine = LlamaCppEngine(gguf_lm, n_ctx=512, cache_dir=path.parent)
        try:
            assert engine.meter.cached_cost_curve() is not None
        finally:
            engine.close()
    yield path
    os.environ.pop(SHARED_COSTS_ENV, None)


@pytest.fixture(autouse=True)
def _isolated_dirs(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    shared_costs: Path,
) -> None:
    """Each test writes its data, cache and config under its own temporary directory; cost
    curves come from the run's shared cache unless the test is marked `private_costs`."""
    base = tmp_path_factory.mktemp("samchat-home")
    for name in ("DATA", "CACHE", "CONFIG"):
        monkeypatch.setenv(f"SAMCHAT_{name}_DIR", str(base / name.lower()))
    if request.node.get_closest_marker("private_costs") is None:
        share_costs(base / "cache")


@pytest.fixture(scope="session")
def default_lm(shared_costs: Path, request: pytest.FixtureRequest) -> Iterator[object]:
    """The real default model (SmolLM2-135M-Instruct) on the torch engine in float32, loaded
    once. Its cost curve and kernel plan are measured here, once per run, into the shared
    cache: tests in this process take them from the engine's memo, the processes they start
    (`samchat serve --engine torch`) from the file. A run of all_cores tests only skips it."""
    from samchat.engines.torch.engine import TorchEngine
    from samchat.models import load_model
    from samchat.models.loader import ModelSpec

    lm = load_model(ModelSpec(engine="torch", dtype="float32"))
    if request.config.stash.get(_MEASURE_CURVES, True):
        TorchEngine(lm, shared_costs.parent).meter.cost_curve()
    yield lm


@pytest.fixture(scope="session")
def gguf_lm() -> Iterator[object]:
    """The real default model run by llama.cpp straight from its bundled Q4_1 GGUF. `make setup`
    builds llama-cpp-python: a missing build fails these tests rather than skipping them."""
    from samchat.models import load_model
    from samchat.models.loader import ModelSpec

    yield load_model(ModelSpec(engine="llamacpp"))


@pytest.fixture(scope="session")
def unmeasured_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled GGUF copied elsewhere, so that no engine speed is kept for it: the app and
    serve measure the engines after its first answer. One per worker, named after it: its
    packing for the flat engine is kept once, and replaces the run before's."""
    import shutil

    from samchat.models.default import bundled_gguf

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path = tmp_path_factory.mktemp("unmeasured") / f"unmeasured-{worker}.gguf"
    shutil.copyfile(bundled_gguf(), path)
    return path


def _leaked(before: set[threading.Thread]) -> list[threading.Thread]:
    """Threads a test left running: any new non-daemon thread, and samchat's own workers (but
    the process's engine thread, which lives as long as the process by design)."""
    from samchat.engines.engine_thread import ENGINE_THREAD

    return [
        t
        for t in threading.enumerate()
        if t not in before
        and t.is_alive()
        and (not t.daemon or t.name.startswith("samchat-"))
        and t.name != ENGINE_THREAD.name
    ]


@pytest.fixture(autouse=True)
def _no_leaks() -> Iterator[None]:
    """Fail a test that leaves a thread (a worker, an indexer) or an open static index behind:
    such leftovers hold locks and CPU and made later tests stall."""
    before = set(threading.enumerate())
    index = sys.modules.get("samchat.sam.index")
    open_before = set(index.open_indexes()) if index is not None else set()
    yield
    deadline = time.monotonic() + 5.0  # a stopping thread gets a moment to end
    while (leaked := _leaked(before)) and time.monotonic() < deadline:
        time.sleep(0.02)
    problems = [f"thread {t.name!r} still running" for t in leaked]
    index = sys.modules.get("samchat.sam.index")
    if index is not None and set(index.open_indexes()) - open_before:
        gc.collect()  # an index the test dropped without close() is gone, not left open
        for path in set(index.open_indexes()) - open_before:
            problems.append(f"static index {path} left open")
        index.close_all(keep=open_before)  # so one leak does not fail every later test too
    if problems:
        pytest.fail("the test leaked: " + "; ".join(problems), pytrace=False)
