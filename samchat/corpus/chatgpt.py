"""Reading a ChatGPT data export (`conversations.json`) into chats with their branches."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samchat.corpus.readers import Skip

EXPORT_NAME = "conversations.json"
_ROLES = ("user", "assistant", "system")


@dataclass
class ExportedMessage:
    key: str
    parent_key: str | None  # nearest kept ancestor (hidden/tool nodes are dropped)
    role: str
    content: str
    created_at: float | None
    model: str | None


@dataclass
class ExportedChat:
    source_id: str
    title: str
    created_at: float | None
    updated_at: float | None
    messages: list[ExportedMessage] = field(default_factory=list)  # parents before children


def _malformed(why: str) -> Skip:
    return Skip(f"malformed ChatGPT export: {why}")


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if not isinstance(content, dict):
        return ""
    parts = content.get("parts")
    if isinstance(parts, list):
        return "\n".join(p for p in parts if isinstance(p, str)).strip()
    text = content.get("text")
    return text.strip() if isinstance(text, str) else ""


def _time(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _conversation(index: int, conv: object) -> ExportedChat:
    if not isinstance(conv, dict) or not isinstance(conv.get("mapping"), dict):
        raise _malformed(f"conversation {index} has no 'mapping' of messages")
    mapping: dict[str, Any] = conv["mapping"]
    source_id = str(conv.get("conversation_id") or conv.get("id") or f"index-{index}")
    chat = ExportedChat(
        source_id=source_id,
        title=str(conv.get("title") or "Untitled chat"),
        created_at=_time(conv.get("create_time")),
        updated_at=_time(conv.get("update_time")),
    )
    for key, node in mapping.items():
        if not isinstance(node, dict):
            raise _malformed(f"conversation {index}: node {key!r} is not an object")
    roots = [k for k, n in mapping.items() if n.get("parent") not in mapping]
    # Depth-first from the roots keeps parents before children; `kept` maps a node to the
    # nearest ancestor that became a message.
    stack: list[tuple[str, str | None]] = [(k, None) for k in reversed(roots)]
    seen: set[str] = set()
    while stack:
        key, kept_parent = stack.pop()
        if key in seen or key not in mapping:
            continue
        seen.add(key)
        node = mapping[key]
        message = node.get("message")
        next_parent = kept_parent
        if isinstance(message, dict):
            author = message.get("author")
            role = author.get("role") if isinstance(author, dict) else None
            meta = message.get("metadata")
            hidden = isinstance(meta, dict) and meta.get("is_visually_hidden_from_conversation")
            text = _text_of(message)
            if role in _ROLES and text and not hidden:
                model = meta.get("model_slug") if isinstance(meta, dict) else None
                chat.messages.append(
                    ExportedMessage(
                        key=key,
                        parent_key=kept_parent,
                        role=str(role),
                        content=text,
                        created_at=_time(message.get("create_time")),
                        model=str(model) if model else None,
                    )
                )
                next_parent = key
        children = node.get("children")
        if isinstance(children, list):
            stack.extend((str(c), next_parent) for c in reversed(children))
    return chat


def read_export(path: Path) -> list[ExportedChat]:
    """Parse a conversations.json export; raise Skip with a one-line reason if it is malformed."""
    try:
        with path.open("rb") as fh:
            data = json.load(fh)
    except UnicodeDecodeError:
        raise _malformed("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _malformed(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except OSError as exc:
        raise Skip(f"cannot read ({exc.strerror})") from None
    if not isinstance(data, list):
        raise _malformed("expected a list of conversations at the top level")
    return [_conversation(i, conv) for i, conv in enumerate(data)]
