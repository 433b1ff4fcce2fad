"""samchat homes for tests and the processes they start: where cost curves are shared."""

from __future__ import annotations

import os
from pathlib import Path

# Set by the session fixture `shared_costs` (tests/conftest.py): the run's cost-curve cache.
SHARED_COSTS_ENV = "SAMCHAT_TESTS_SHARED_COSTS"


def share_costs(cache_dir: Path) -> None:
    """Let a samchat cache directory (a test's, or a subprocess's home) read and write the
    run's cost curves, so that each is measured once per run rather than once per test."""
    shared = os.environ.get(SHARED_COSTS_ENV)
    if not shared:
        return
    cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    costs = cache_dir / "costs"
    if not costs.exists():
        costs.symlink_to(shared, target_is_directory=True)
