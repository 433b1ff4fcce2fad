"""Messages that worker threads post to the app or the conversation (post_message is
thread-safe), and the reply job they carry. The reply and sources workers' messages are the
conversation's own: they do not bubble."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

from samchat.chat.live_stats import LiveStats
from samchat.chat.reply_feed import ReplyFeed
from samchat.tui.widgets.message_view import MessageView

if TYPE_CHECKING:
    from samchat.chat.generator import Generator, Replies
    from samchat.chat.opening import Model
    from samchat.chat.service import PendingReply, ReplyRecord
    from samchat.corpus.indexing import BackgroundIndexer
    from samchat.corpus.retrieval import Fitted
    from samchat.models.loader import ModelSpec


@dataclass
class ReplyJob:
    """A reply the UI streams: the chat service's pending reply and the view it fills."""

    reply: PendingReply
    view: MessageView
    live: LiveStats
    cancel: threading.Event = field(default_factory=threading.Event)
    feed: ReplyFeed = field(default_factory=ReplyFeed)  # its text and steps, taken per frame

    @property
    def chat_id(self) -> int | None:
        return self.reply.chat_id


@dataclass
class ReplyReading(Message, bubble=False):
    job: ReplyJob
    done: int  # prompt tokens read of
    total: int


@dataclass
class ReplyFinished(Message, bubble=False):
    job: ReplyJob
    record: ReplyRecord


@dataclass
class CurveTiming(Message, bubble=False):
    """The reply worker times this machine's verification costs (True), or is done (False)."""

    busy: bool


@dataclass
class EngineTrial(Message, bubble=False):
    """The reply worker measures the engines for this model (busy; what it does), or is done."""

    busy: bool
    doing: str = ""


@dataclass
class EngineSwitch(Message):
    """The engines were measured after an answer, and another one is faster: replies come
    from `generator` (on the model loaded on it) from the next one on."""

    generator: Generator
    notice: str


@dataclass
class ReplyFailed(Message, bubble=False):
    job: ReplyJob
    error: str


@dataclass
class ModelProgress(Message):
    text: str


@dataclass
class ModelLoaded(Message):
    lm: Model
    generator: Replies
    indexer: BackgroundIndexer | None  # its static index, kept in step with the store
    spec: ModelSpec  # what was asked for (the model screen opens on it)
    picked: bool  # on the model screen: config.toml keeps it
    warning: str


@dataclass
class ModelFailed(Message):
    error: str


@dataclass
class Notice(Message):
    """An error from a background thread, shown as a notification."""

    text: str
    title: str


@dataclass
class IndexProgress(Message):
    """The background indexer syncing the static index with the store."""

    done: int
    total: int


@dataclass
class SourcesReady(Message, bubble=False):
    """The question with its documents, fitted into the model's context."""

    chat_id: int | None
    question: str
    fitted: Fitted


@dataclass
class SourcesFailed(Message, bubble=False):
    question: str
    error: str
