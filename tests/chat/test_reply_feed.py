"""The reply feed: what the decoding thread adds is what the UI takes, in order, whole."""

from __future__ import annotations

import threading

from samchat.chat.live_stats import LiveStats
from samchat.chat.reply_feed import ReplyFeed


def test_a_take_holds_everything_added_since_the_last_in_order() -> None:
    feed = ReplyFeed()
    assert feed.take() is None
    feed.add_step(0.1, True, 10.1)
    feed.add_text("Hel", [("Hel", "plain")], 1, ["plain"], 10.1)
    feed.add_step(0.2, False, 10.3)
    feed.add_text("lo!", [("lo", "dyn"), ("!", "plain")], 2, ["dyn", "plain"], 10.3)
    batch = feed.take()
    assert batch is not None
    assert batch.text == "Hello!"
    assert batch.pieces == [("Hel", "plain"), ("lo", "dyn"), ("!", "plain")]
    assert batch.deltas == [(1, ["plain"], 10.1), (2, ["dyn", "plain"], 10.3)]
    assert batch.steps == [(0.1, True, 10.1), (0.2, False, 10.3)]
    assert feed.take() is None
    live = LiveStats(started=10.0)
    live.apply(batch)
    assert (live.tokens, live.steps, live.by_source) == (3, 2, {"plain": 2, "dyn": 1})


def test_nothing_is_lost_or_doubled_while_a_thread_adds_and_another_takes() -> None:
    feed = ReplyFeed()
    n = 20_000
    texts: list[str] = []
    tokens = 0
    done = threading.Event()

    def decode() -> None:
        for i in range(n):
            feed.add_text(f"{i},", [(f"{i},", "plain")], 1, ["plain"], float(i))
        done.set()

    def take() -> None:
        nonlocal tokens
        batch = feed.take()
        if batch is not None:
            texts.append(batch.text)
            tokens += sum(k for k, _, _ in batch.deltas)

    worker = threading.Thread(target=decode)
    worker.start()
    while not done.is_set():
        take()
    worker.join()
    take()  # what came after the last take in the loop
    assert "".join(texts) == "".join(f"{i}," for i in range(n))
    assert tokens == n
