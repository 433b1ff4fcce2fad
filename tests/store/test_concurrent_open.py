"""Two samchat processes starting at once on a new data directory (say `samchat import` in a
shell while the TUI starts) both open the new database: neither gets "database is locked"."""

from __future__ import annotations

import threading
from pathlib import Path

from samchat.store.connection import connect


def test_two_connections_open_a_new_database_at_once(tmp_path: Path) -> None:
    # Switching a new file to WAL used to fail at once (no busy wait) for the second opener,
    # in about one round in ten on a 2-core machine; SQLite's locks behave the same between
    # two connections of one process as between two processes.
    problems: list[BaseException] = []
    for round_ in range(150):
        path = tmp_path / f"r{round_}" / "samchat.db"
        start = threading.Barrier(2)

        def open_it(path: Path = path, start: threading.Barrier = start) -> None:
            start.wait()
            try:
                conn = connect(path)
                mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
                conn.close()
                assert mode == "wal"
            except BaseException as exc:  # collected and reported below
                problems.append(exc)

        threads = [threading.Thread(target=open_it) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert problems == []
