"""A reply's record stays typed (StoredStats) through the chat layer and becomes the stored JSON
only where the store writes it: the same keys and values as ever, so old databases and new ones
read alike."""

from __future__ import annotations

from pathlib import Path

from samchat.chat.record import ReplyRecorder, SourceRef, StoredStats, save_reply
from samchat.decoding.events import ReplyDone, ReplyStats, TextDelta
from samchat.store import Store

FIGURES = ReplyStats(
    tokens=5, seconds=0.5, tokens_per_s=10.0, steps=3, mat=5 / 3,
    accepted_by_drafter={"dyn": 2}, speedup_est=1.4, prefill_s=0.1, ttft_s=0.2,
    prompt_tokens=30, reused_tokens=12, method="sam", provenance=((4, "dyn"), (7, "plain")),
)  # fmt: skip
SOURCE = SourceRef("notes", "/tmp/notes.txt")


def _recorded() -> StoredStats:
    recorder = ReplyRecorder(started=0.0, sources=[SOURCE])
    for at, tokens in ((1.0, [1, 2]), (2.0, [3]), (3.0, [4, 5])):
        recorder.observe(TextDelta("x", token_ids=tokens, sources=["dyn"] * len(tokens)), at)
    return recorder.stats(ReplyDone("Hello world", "eos", FIGURES, "dropped 1 turn"))


def test_the_record_is_stored_with_the_keys_it_always_had(tmp_path: Path) -> None:
    stats = _recorded()
    assert stats.reply is FIGURES and stats.finish_reason == "eos"
    assert stats.notice == "dropped 1 turn" and stats.sources == (SOURCE,) and stats.speed_trace
    expected = {
        **FIGURES.to_dict(),
        "finish_reason": "eos",
        "speed_trace": list(stats.speed_trace),
        "notice": "dropped 1 turn",
        "sources": [
            {"title": "notes", "path": "/tmp/notes.txt", "passage_id": None, "document_id": None}
        ],
    }
    assert stats.to_dict() == expected
    with Store.open(tmp_path / "samchat.db") as store:
        chat = store.create_chat("t", "m")
        question = store.add_message(chat, "user", "Hi", None)
        reply = save_reply(store, chat, question, "Hello world", model="m", stats=stats,
                           finish_reason="eos")  # fmt: skip
        row = store.message(reply)
        columns = store.conn.execute(
            "SELECT tokens, seconds, steps, mat, speedup, accepted_by_drafter FROM messages"
            " WHERE id = ?",
            (reply,),
        ).fetchone()
    # What is read back is what was written, and the columns hold the figures.
    assert row.stats == stats and row.finish_reason == "eos"
    assert tuple(columns) == (5, 0.5, 3, 5 / 3, 1.4, '{"dyn": 2}')
    assert stats.provenance_summary() == {"dyn": 4, "plain": 7}


def test_a_plain_record_keeps_no_notice_or_sources(tmp_path: Path) -> None:
    stats = StoredStats(FIGURES, "stop")
    assert "notice" not in stats.to_dict() and "sources" not in stats.to_dict()
    with Store.open(tmp_path / "samchat.db") as store:
        chat = store.create_chat("t", "m")
        question = store.add_message(chat, "user", "Hi", None)
        reply = save_reply(store, chat, question, "x", model="m", stats=stats, finish_reason="stop")
        unrecorded = save_reply(store, chat, question, "y", model="m", stats=None,
                                finish_reason="stop")  # fmt: skip
        assert store.message(reply).stats == stats
        assert store.message(unrecorded).stats is None
