"""The app's path: the store's add_message, record.save_reply and the BackgroundIndexer poked
after each reply; ARGS: how many questions (default: until killed)."""

from __future__ import annotations

import time

from fault_campaign.children.common import ack, parse
from fault_campaign.texts import FP, WORDS, encode
from samchat.chat.record import StoredStats, save_reply
from samchat.corpus.indexing import BackgroundIndexer
from samchat.decoding.events import ReplyStats
from samchat.store import Store


def main() -> None:
    args = parse()
    rng, seed, data = args.rng, args.seed, args.data
    limit = args.number(0, 10**9)
    chat_data = Store.open(data / "samchat.db")
    indexer = BackgroundIndexer(data / "samchat.db", FP, encode, 0, root=data / "index").start()
    chat = chat_data.create_chat(f"tui chat {seed}", "m")
    parent = None
    for i in range(limit):
        question = f"tui question {seed}.{i} " + " ".join(rng.choice(WORDS) for _ in range(12))
        user_id = chat_data.add_message(chat, "user", question, parent)
        ack("msg", user_id, question)
        reply = f"tui answer {seed}.{i}:" + "".join(" " + rng.choice(WORDS) for _ in range(40))
        time.sleep(0.005)  # the reply's decoding: the indexer's sync runs meanwhile
        figures = ReplyStats(tokens=40, seconds=0.02, tokens_per_s=2000.0, steps=40, mat=1.0)
        stats = StoredStats(figures, "stop")
        parent = save_reply(
            chat_data, chat, user_id, reply, model="m", stats=stats, finish_reason="stop"
        )
        ack("msg", parent, reply)
        indexer.poke()
    indexer.wait_idle(60)
    indexer.stop()


if __name__ == "__main__":
    main()
