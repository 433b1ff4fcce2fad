"""Static index flushes and compactions until killed: documents of 500-4,000 random words added
to the store and the index, flushed every second document, merged every sixth."""

from __future__ import annotations

from fault_campaign.children.common import ack, ack_flushed, open_data, parse
from fault_campaign.texts import WORDS, encode


def main() -> None:
    args = parse()
    rng, seed = args.rng, args.seed
    store, manager = open_data(args.data)
    i = 0
    while True:
        words = rng.randint(500, 4000)
        text = f"generated {seed}.{i} " + " ".join(rng.choice(WORDS) for _ in range(words))
        doc_id = store.add_document(f"/generated/{seed}/{i}", f"G{i}", text, "text")
        ack("doc", doc_id, text)
        manager.add(f"doc:{doc_id}", encode(text))
        if i % 2 == 1:
            manager.flush()
            for key in manager.index.document_ids():
                ack_flushed(key)
        if i % 6 == 5:
            manager.compact()
        i += 1


if __name__ == "__main__":
    main()
