"""`samchat import`'s path: import_paths over ARGS[0], each document added to the static index
as it commits (flushed every 5 documents)."""

from __future__ import annotations

from pathlib import Path

from fault_campaign.children.common import ack, open_data, parse
from fault_campaign.texts import encode
from samchat.corpus.importer import import_paths


def main() -> None:
    args = parse()
    store, manager = open_data(args.data)
    imported = 0

    def on_document(doc_id: int, tokens: list[int] | None) -> None:
        nonlocal imported
        assert tokens is not None  # import_paths is given encode: every document has tokens
        ack("doc", doc_id, store.document_text(doc_id))
        manager.add(f"doc:{doc_id}", tokens)
        imported += 1
        if imported % 5 == 0:
            manager.flush()

    import_paths(store, [Path(args.rest[0])], encode=encode, on_document=on_document)
    manager.flush()


if __name__ == "__main__":
    main()
