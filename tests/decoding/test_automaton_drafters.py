"""The conversation's automaton drafter: drafts from earlier text, incremental across turns,
kept across edits, rebuilt once it outgrows the conversation."""

from __future__ import annotations

from samchat.decoding.automaton_drafters import DynamicSamDrafter


def test_dynamic_drafter_drafts_from_earlier_text_and_keeps_it_across_edits() -> None:
    d = DynamicSamDrafter()
    d.begin([1, 2, 3, 4, 5, 9, 1, 2, 3])
    assert d.match_len() == 3
    tree = d.propose(4)
    assert tree is not None and tree.tokens == [4, 5, 9, 1]
    d.advance([4, 5])
    assert d.match_len() == 5
    # The next call's context extends the text: incremental.
    d.begin([1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 5, 7])
    assert d.text_tokens == 12 and d.match_len() == 0
    # An edit: the old text stays in the automaton and still drafts; the cursor restarts.
    d.begin([8, 8, 1, 2])
    assert d.text_tokens == 16 and d.match_len() == 2
    tree = d.propose(3)
    assert tree is not None and tree.tokens == [3, 4, 5]
    d.begin([8, 8, 1, 2, 6])  # extends the edited conversation: incremental again
    assert d.text_tokens == 17
    # Once the automaton outgrows the conversation it is rebuilt from the context alone.
    d.begin(list(range(100, 100 + 2 * DynamicSamDrafter.REBUILD_SLACK)))
    d.begin([7, 7, 7])
    assert d.text_tokens == 3 and d.match_len() == 2
    tree = d.propose(3)
    assert tree is not None and tree.tokens == [7, 7]
