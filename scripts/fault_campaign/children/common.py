"""What every child program shares: its arguments, the acknowledgement it prints after each
commit, and the store and static index it writes."""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

from fault_campaign.texts import FP, digest, encode
from samchat.corpus.indexing import IndexManager
from samchat.store import Store


@dataclass
class Args:
    """DATA SEED [ARGS]: the data directory, the seed of the child's random words, the rest."""

    data: Path
    rng: random.Random
    seed: int
    rest: list[str]

    def number(self, i: int, default: int) -> int:
        """The i-th of the rest as an int, or default where it is not given."""
        return int(self.rest[i]) if len(self.rest) > i else default


def parse() -> Args:
    seed = int(sys.argv[2])
    return Args(Path(sys.argv[1]), random.Random(seed), seed, sys.argv[3:])


def ack(kind: str, key: object, text: str) -> None:
    """The row `key` of `kind` (doc or msg) is committed with this text."""
    print("ack", kind, key, digest(text), flush=True)


def ack_flushed(key: str) -> None:
    """The static index entry `key` is flushed to a segment."""
    print("ack", "idx", key, "-", flush=True)


def open_data(data: Path) -> tuple[Store, IndexManager]:
    """The store under `data` and its static index, open."""
    store = Store.open(data / "samchat.db")
    manager = IndexManager(store, FP, encode, 0, root=data / "index")
    manager.open()
    return store, manager
