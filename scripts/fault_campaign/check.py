"""Checking a data directory after a fault: nothing acknowledged lost, everything sound."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from fault_campaign.process import Ack
from fault_campaign.texts import FP, digest, encode
from samchat.corpus.indexing import IndexManager
from samchat.errors import IndexCorruptError, SamchatError
from samchat.sam.index import StaticIndex
from samchat.store import Store, deep_check


@dataclass
class Check:
    lost: int = 0  # acknowledged rows missing or different
    problems: list[str] = field(default_factory=list)
    index_rebuilt: bool = False


def check_data(data: Path, acks: list[Ack], sources: dict[str, str] | None = None) -> Check:
    """Everything acknowledged is there, unchanged; the database passes every check, opens with
    samchat; documents are whole; replies hang under their question; the static index opens
    without a rebuild and one sync makes it hold exactly the store."""
    out = Check()
    db = data / "samchat.db"
    try:
        store = Store.open(db)
    except SamchatError as exc:
        out.problems.append(f"store does not open: {exc}")
        out.lost = len([a for a in acks if a.kind != "idx"])
        return out
    with store:
        verdict = deep_check(store.conn)
        if verdict != "ok":
            out.problems.append(f"check: {verdict}")
        conn = store.conn
        flushed: set[str] = set()
        for a in acks:
            if a.kind == "idx":
                flushed.add(a.key)
                continue
            sql = {
                "doc": "SELECT text FROM documents WHERE id = ?",
                "msg": "SELECT content FROM messages WHERE id = ?",
            }[a.kind]
            row = conn.execute(sql, (int(a.key),)).fetchone()
            if row is None or digest(str(row[0])) != a.hash:
                out.lost += 1
        for doc_id, text, stored_hash, source in conn.execute(
            "SELECT id, text, content_hash, source FROM documents"
        ):
            whole = hashlib.sha256(text.encode()).hexdigest() == stored_hash
            if not whole or (sources is not None and sources.get(source, text) != text):
                out.problems.append(f"document {doc_id} is not whole")
        orphans = conn.execute(
            "SELECT COUNT(*) FROM messages a LEFT JOIN messages q ON q.id = a.parent_id"
            " WHERE a.role = 'assistant' AND (q.id IS NULL OR q.role != 'user')"
        ).fetchone()[0]
        if orphans:
            out.problems.append(f"{orphans} replies without their question")
        directory = data / "index" / FP
        if directory.exists():
            try:
                static = StaticIndex.open(directory, FP, 0)
            except IndexCorruptError as exc:
                out.index_rebuilt = True
                out.problems.append(f"index needs a rebuild: {exc}")
            else:
                missing = flushed - static.document_ids()
                if missing:
                    out.problems.append(f"{len(missing)} flushed index entries lost")
                static.close()
            manager = IndexManager(store, FP, encode, 0, root=data / "index")
            manager.open()
            if manager.index.document_ids() != store.index_keys():
                out.problems.append("the index does not match the store after a sync")
            manager.close()
    return out
