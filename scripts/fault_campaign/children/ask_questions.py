"""`samchat ask`'s path: the chat service's send and finish with a fake reply stream, then the
index sync; ARGS: how many questions (default: until killed), words per reply (default 20)."""

from __future__ import annotations

import time

from fault_campaign.children.common import ack, open_data, parse
from fault_campaign.texts import WORDS
from samchat.chat.record import StoredStats
from samchat.chat.service import ChatService, ReplyRecord
from samchat.decoding.events import ReplyStats


def main() -> None:
    args = parse()
    rng, seed = args.rng, args.seed
    store, manager = open_data(args.data)
    service = ChatService(store)
    limit = args.number(0, 10**9)
    size = args.number(1, 20)
    for i in range(limit):
        question = f"question {seed}.{i} about " + " ".join(rng.choice(WORDS) for _ in range(12))
        pending = service.send(question, chat_id=None, parent_id=None, model="m")
        ack("msg", pending.parent_id, question)
        reply = f"answer {seed}.{i}:"
        for w in range(size):
            reply += " " + rng.choice(WORDS)
            if w % 20 == 0:
                time.sleep(0.001)  # a reply takes time: kills land inside it too
        figures = ReplyStats(
            tokens=size, seconds=0.02, tokens_per_s=size / 0.02, steps=size, mat=1.0
        )
        record = ReplyRecord(reply, "stop", StoredStats(figures, "stop"))
        reply_id = service.finish(pending, record)
        ack("msg", reply_id, reply)
        manager.sync()


if __name__ == "__main__":
    main()
