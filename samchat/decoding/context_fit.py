"""Making a conversation fit a context: the oldest turns go first, the system prompt and the
question stay. Shared by the local session (counted in tokens) and remote replies (estimated)."""

from __future__ import annotations

from collections.abc import Callable

from samchat.errors import SamchatError
from samchat.messages import Message


def drop_oldest_turn(messages: list[Message]) -> int:
    """Remove the oldest non-system message before the last one, and the assistant replies that
    would then open the conversation; how many went (0: nothing left to drop)."""
    idx = next((i for i, m in enumerate(messages[:-1]) if m.get("role") != "system"), None)
    if idx is None:
        return 0
    del messages[idx]
    dropped = 1
    while idx < len(messages) - 1 and messages[idx].get("role") == "assistant":
        del messages[idx]  # a conversation does not start with an assistant turn
        dropped += 1
    return dropped


def dropped_notice(dropped: int) -> str:
    """The notice a reply carries when turns were left out ("" when none were)."""
    if not dropped:
        return ""
    return f"dropped the {dropped} oldest message(s) to fit the model's context"


def fit_rendered(
    render: Callable[[list[Message]], list[int]],
    messages: list[Message],
    reserve: int,
    limit: int,
) -> tuple[list[int], str]:
    """The prompt's token ids, rendered after dropping the oldest non-system turns while it
    leaves fewer than `reserve` of the `limit` tokens for the reply, and the notice saying so."""
    if not messages:
        raise SamchatError("no messages to reply to")
    for m in messages:
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise SamchatError("each message needs a role and a content")
    msgs = list(messages)
    ids = render(msgs)
    dropped = 0
    while len(ids) + reserve > limit:
        gone = drop_oldest_turn(msgs)
        if not gone:
            raise SamchatError(
                f"the message is too long for the model's context ({len(ids)} tokens, "
                f"limit {limit} incl. {reserve} for the reply); shorten it"
            )
        dropped += gone
        ids = render(msgs)
    return ids, dropped_notice(dropped)
