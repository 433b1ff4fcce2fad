"""Messages that worker threads post to the app (post_message is thread-safe)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message

from samchat.chat.live_stats import LiveStats
from samchat.tui.messages import MessageView

if TYPE_CHECKING:
    from samchat.chat.backend import Generator
    from samchat.corpus.retrieval import Fitted
    from samchat.models.loader import LoadedModel


@dataclass
class ReplyJob:
    chat_id: int
    parent_id: int  # the user message answered
    view: MessageView
    live: LiveStats
    model: str
    cancel: threading.Event = field(default_factory=threading.Event)
    sources: list[dict[str, Any]] = field(default_factory=list)  # put before the question


class ReplyDelta(Message):
    def __init__(
        self,
        job: ReplyJob,
        text: str,
        pieces: list[tuple[str, str]],
        n: int,
        sources: list[str],
        t: float,
    ) -> None:
        super().__init__()
        self.job, self.text, self.pieces, self.n, self.sources, self.t = (
            job,
            text,
            pieces,
            n,
            sources,
            t,
        )


class ReplyStep(Message):
    def __init__(self, job: ReplyJob, forward_s: float) -> None:
        super().__init__()
        self.job, self.forward_s = job, forward_s


class ReplyFinished(Message):
    def __init__(
        self, job: ReplyJob, text: str, finish_reason: str, stats: dict[str, Any], notice: str
    ) -> None:
        super().__init__()
        self.job, self.text, self.finish_reason, self.stats, self.notice = (
            job,
            text,
            finish_reason,
            stats,
            notice,
        )


class ReplyFailed(Message):
    def __init__(self, job: ReplyJob, error: str) -> None:
        super().__init__()
        self.job, self.error = job, error


class ModelProgress(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ModelLoaded(Message):
    def __init__(
        self,
        lm: LoadedModel,
        generator: Generator,
        source: str,
        device: str,
        engine: str,
        warning: str,
    ) -> None:
        super().__init__()
        self.lm, self.generator, self.source, self.device, self.engine, self.warning = (
            lm,
            generator,
            source,
            device,
            engine,
            warning,
        )


class ModelFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class Notice(Message):
    """An error from a background thread, shown as a notification."""

    def __init__(self, text: str, title: str) -> None:
        super().__init__()
        self.text, self.title = text, title


class IndexProgress(Message):
    """The background indexer syncing the static index with the store."""

    def __init__(self, done: int, total: int) -> None:
        super().__init__()
        self.done, self.total = done, total


class SourcesReady(Message):
    """The question with its documents, fitted into the model's context."""

    def __init__(self, chat_id: int | None, question: str, fitted: Fitted) -> None:
        super().__init__()
        self.chat_id, self.question, self.fitted = chat_id, question, fitted


class SourcesFailed(Message):
    def __init__(self, question: str, error: str) -> None:
        super().__init__()
        self.question, self.error = question, error
