"""A reply's record (StoredStats) reads the stored JSON of any version leniently, and a fresh
record shows the same figures as its stored copy read back. The expected lines are written out
by hand: they are what the app showed when it read the raw dicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.chat.live_stats import LiveStats, format_stats
from samchat.chat.record import save_reply
from samchat.figures import ReplyStats, SourceRef, StoredStats
from samchat.store import Store


@pytest.mark.parametrize("stored", [{}, None, [], "stats", 42])
def test_nothing_stored_shows_as_none(stored: object) -> None:
    shown = StoredStats.parse(stored)
    assert shown is None
    assert format_stats(shown) == "no statistics stored"


def _parse(stored: object) -> StoredStats:
    record = StoredStats.parse(stored)
    assert record is not None
    return record


def test_a_row_from_an_older_version_shows_defaults_for_what_it_lacks() -> None:
    # No speedup_est, method, accepted_by_drafter, ttft, trace, sources or provenance yet;
    # "speedup" is a key since dropped.
    old = {"tokens": 12, "seconds": 0.6, "tokens_per_s": 20.0, "steps": 8, "mat": 1.5}
    shown = _parse({**old, "speedup": 1.1})
    assert format_stats(shown) == "12 tok · 0.60 s · 20.0 tok/s · MAT 1.50 · speedup 0.00x"
    assert shown.reply.method == "" and shown.finish_reason == ""
    assert shown.speed_trace == () and shown.sources == () and shown.reply.provenance == ()


def test_a_remote_reply_shows_speed_and_first_token() -> None:
    stored = {
        "tokens": 7, "seconds": 0.35, "tokens_per_s": 20.0, "steps": 0, "mat": 0.0,
        "accepted_by_drafter": {}, "speedup_est": 0.0, "ttft_s": 0.25, "method": "remote",
        "provenance": [], "finish_reason": "cancelled", "speed_trace": [18.5, 21.0],
    }  # fmt: skip
    shown = _parse(stored)
    line = "7 tok · 0.35 s · 20.0 tok/s · first token 0.25 s · remote · cancelled"
    assert format_stats(shown) == line
    assert shown.speed_trace == (18.5, 21.0)
    live = LiveStats(0.0)
    live.on_done(shown)
    assert live.remote and live.ttft == 0.25 and live.tokens_per_s == 20.0


def test_values_of_the_wrong_type_show_as_their_defaults() -> None:
    garbage: dict[str, object] = {
        "tokens": "x", "seconds": None, "tokens_per_s": "12.5", "mat": [1], "speedup_est": {},
        "ttft_s": "soon", "method": 3, "finish_reason": None, "accepted_by_drafter": ["dyn"],
        "speed_trace": "fast", "sources": "notes", "provenance": [[2]],
    }  # fmt: skip
    shown = _parse(garbage)
    # "12.5" read as 12.5, as float() always did; the rest fall back to the defaults.
    assert format_stats(shown) == "0 tok · 0.00 s · 12.5 tok/s · MAT 0.00 · speedup 0.00x"
    assert (shown.reply.method, shown.finish_reason, shown.reply.ttft_s) == ("", "", 0.0)
    assert shown.reply.accepted_by_drafter == {} and shown.speed_trace == ()
    assert shown.sources == () and shown.reply.provenance == ()


def test_bad_entries_inside_lists_and_counts_are_dropped() -> None:
    stored = {
        "tokens": 10, "seconds": 1, "tokens_per_s": 10, "mat": "2", "speedup_est": 1.25,
        "method": "sam", "accepted_by_drafter": {"dyn": "4", "tr": "many", "static": 1},
        "speed_trace": [9.5, "x", None, 11], "sources": [{"title": "notes"}, "junk"],
        "provenance": [[3, "dyn"], [2, "plain"]],
    }  # fmt: skip
    shown = _parse(stored)
    assert format_stats(shown) == (
        "10 tok · 1.00 s · 10.0 tok/s · MAT 2.00 · speedup 1.25x · dyn 40% static 10% tr 0% · sam"
    )
    assert shown.reply.accepted_by_drafter == {"dyn": 4, "static": 1}
    assert shown.speed_trace == (9.5, 11.0) and shown.sources == (SourceRef("notes", None),)
    assert shown.reply.provenance == ((3, "dyn"), (2, "plain"))
    # One run that is not [n, drafter] and the runs no longer cover the text: none kept.
    runs = _parse({**stored, "provenance": [[3, "dyn"], ["x", "plain"]]}).reply.provenance
    assert runs == ()


FIGURES = ReplyStats(
    tokens=5, seconds=0.5, tokens_per_s=10.0, steps=3, mat=5 / 3,
    accepted_by_drafter={"dyn": 2}, speedup_est=1.4, prefill_s=0.1, ttft_s=0.2,
    prompt_tokens=30, reused_tokens=12, method="sam", provenance=((4, "dyn"), (7, "plain")),
)  # fmt: skip


def test_a_fresh_record_shows_what_its_stored_copy_shows(tmp_path: Path) -> None:
    fresh = StoredStats(
        FIGURES, "eos", (9.5, 10.25), "dropped 1 turn", (SourceRef("notes", "/n", 3, 1),)
    )
    with Store.open(tmp_path / "samchat.db") as store:
        chat = store.create_chat("t")
        question = store.add_message(chat, "user", "q", None)
        reply = save_reply(store, chat, question, "Hello world", model="m", stats=fresh,
                           finish_reason="eos")  # fmt: skip
        read_back = store.message(reply).stats
    assert read_back == fresh
    line = "5 tok · 0.50 s · 10.0 tok/s · MAT 1.67 · speedup 1.40x · dyn 40% static 0% tr 0% · sam"
    assert format_stats(fresh) == format_stats(read_back) == line
    assert fresh.finish_reason == "eos" and fresh.speed_trace == (9.5, 10.25)
    assert fresh.reply.provenance == ((4, "dyn"), (7, "plain")) and fresh.reply.ttft_s == 0.2
