"""The data both corruption scenarios damage copies of."""

from __future__ import annotations

import random
from pathlib import Path

from fault_campaign.texts import FP, WORDS, encode
from samchat.corpus.indexing import IndexManager
from samchat.figures import StoredStats
from samchat.store import Store


def build_base(base: Path, rng: random.Random) -> None:
    """A database with documents (some span overflow pages), chats with branches, and a static
    index of several segments."""
    base.mkdir(parents=True)
    with Store.open(base / "samchat.db") as store:
        manager = IndexManager(store, FP, encode, 0, root=base / "index")
        manager.open()
        for i in range(14):
            size = rng.choice((50, 400, 2500))
            text = f"document {i} " + " ".join(rng.choice(WORDS) for _ in range(size))
            doc_id = store.add_document(f"/src/d{i}.txt", f"D{i}", text, "text")
            manager.add(f"doc:{doc_id}", encode(text))
            if i % 5 == 4:
                manager.flush()  # several segments
        for c in range(4):
            chat = store.create_chat(f"chat {c}", "m")
            parent = None
            for t in range(60):
                q = store.add_message(chat, "user", f"question {c}.{t} " * 6, parent)
                parent = store.add_message(
                    chat,
                    "assistant",
                    f"answer {c}.{t} " * 10,
                    q,
                    stats=StoredStats.parse({"tokens": t}),
                )
                if t % 15 == 14:
                    store.add_message(chat, "assistant", f"another answer {c}.{t}", q)
            manager.sync()
        manager.close()
        store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
