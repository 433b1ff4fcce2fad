"""ChatGPT conversations.json exports become chats with their branches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from samchat.corpus.chatgpt import read_export
from samchat.corpus.readers import Skip


def _node(nid: str, parent: str | None, children: list[str], role: str | None, text: str = "",
          hidden: bool = False) -> dict[str, Any]:  # fmt: skip
    message = None
    if role is not None:
        message = {
            "id": nid,
            "author": {"role": role},
            "create_time": 1700000000.0,
            "content": {"content_type": "text", "parts": [text]},
            "metadata": {"model_slug": "gpt-4o", "is_visually_hidden_from_conversation": hidden},
        }
    return {"id": nid, "message": message, "parent": parent, "children": children}


def export_with_branch() -> list[dict[str, Any]]:
    """root (no message) -> hidden system -> user -> two assistant answers (a regeneration);
    the second answer has a follow-up."""
    mapping = {
        "root": _node("root", None, ["sys"], None),
        "sys": _node("sys", "root", ["u1"], "system", "hidden prompt", hidden=True),
        "u1": _node("u1", "sys", ["a1", "a2"], "user", "What is a suffix automaton?"),
        "a1": _node("a1", "u1", [], "assistant", "A DFA of all suffixes."),
        "a2": _node("a2", "u1", ["t1"], "assistant", "The minimal automaton of suffixes."),
        "t1": _node("t1", "a2", ["u2"], "tool", "tool output"),
        "u2": _node("u2", "t1", [], "user", "Thanks!"),
    }
    return [
        {"title": "SAM chat", "create_time": 1700000000.0, "update_time": 1700000100.0,
         "mapping": mapping, "conversation_id": "conv-1", "current_node": "u2"},
    ]  # fmt: skip


def test_branches_survive_and_hidden_nodes_are_dropped(tmp_path: Path) -> None:
    p = tmp_path / "conversations.json"
    p.write_text(json.dumps(export_with_branch()))
    [chat] = read_export(p)
    assert (chat.source_id, chat.title, chat.updated_at) == ("conv-1", "SAM chat", 1700000100.0)
    by_key = {m.key: m for m in chat.messages}
    assert set(by_key) == {"u1", "a1", "a2", "u2"}
    assert by_key["u1"].parent_key is None  # its hidden system parent was dropped
    assert by_key["a1"].parent_key == by_key["a2"].parent_key == "u1"
    assert by_key["u2"].parent_key == "a2"  # re-attached across the tool node
    keys = [m.key for m in chat.messages]
    assert all(keys.index(m.parent_key) < keys.index(m.key) for m in chat.messages if m.parent_key)
    assert by_key["a1"].model == "gpt-4o"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("{not json", "not valid JSON"),
        ('{"a": 1}', "expected a list of conversations"),
        ('[{"title": "x"}]', "conversation 0 has no 'mapping'"),
        ('[{"mapping": {"n": 3}}]', "node 'n' is not an object"),
    ],
)
def test_malformed_exports_are_one_line(tmp_path: Path, content: str, reason: str) -> None:
    p = tmp_path / "conversations.json"
    p.write_text(content)
    with pytest.raises(Skip, match="malformed ChatGPT export") as info:
        read_export(p)
    assert reason in str(info.value) and "\n" not in str(info.value)
