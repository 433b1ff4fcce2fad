"""The chat screen's status line: the model (and why it runs on its engine), the decoding method,
the chat's documents and what the conversation is doing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from samchat.remote import REMOTE
from samchat.tui.states import ModelState

if TYPE_CHECKING:
    from samchat.tui.host import ChatHost
    from samchat.tui.screens.documents import ChatDocuments
    from samchat.tui.widgets.conversation import Conversation


def status_line(host: ChatHost, docs: ChatDocuments, conversation: Conversation) -> str:
    parts = []
    lm = host.lm
    if host.model_state == ModelState.READY and lm is not None:
        runs = " ".join(p for p in (lm.engine, lm.dtype) if p)
        note = getattr(lm, "engine_note", "")  # none for a remote model
        parts.append(f"model {lm.name} ({runs}, {lm.device})" + (f" [{note}]" if note else ""))
    elif host.model_state == ModelState.LOADING:
        parts.append(f"loading model… {host.model_progress}".rstrip())
    elif host.model_state == ModelState.FAILED:
        parts.append("model failed to load (ctrl+l to pick another)")
    else:
        parts.append("no model loaded (ctrl+l)")
    if lm is None or lm.engine != REMOTE:  # a server decodes as it does
        parts.append(f"method {host.cfg.decoding.method}")
    if docs.active:
        parts.append(docs.summary())
    if host.index_progress:
        parts.append(host.index_progress)
    pending, timing = conversation.replies.pending is not None, conversation.replies.timing
    if conversation.preparing:  # a question's documents are being read and fitted
        parts.append("reading documents…")
    elif pending and timing:
        parts.append("your prompt waits: timing drafts on this CPU (once; esc answers now)…")
    elif pending:
        parts.append("your prompt waits for the model…")
    elif timing:
        parts.append("timing drafts on this CPU (once; replies draft after it; esc stops)…")
    elif conversation.replies.measuring and conversation.replies.job is None:
        doing = conversation.replies.measuring
        parts.append(f"measuring the engines on this CPU ({doing}; a prompt goes first)…")
    elif conversation.replies.job is not None:
        parts.append("generating… (esc stops)")
    return " · ".join(parts)
