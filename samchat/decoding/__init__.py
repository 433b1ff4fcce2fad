"""Chat sessions with KV reuse and lossless speculative decoding (suffix-automaton drafts,
tree verification), streaming text and statistics as events."""

from samchat.decoding.drafter import Drafter, Selector
from samchat.decoding.events import Event, ReplyDone, ReplyStats, StepStats, TextDelta
from samchat.decoding.params import METHODS, DecodingConfig, SamplingParams
from samchat.decoding.session import ChatSession, Message
from samchat.decoding.tree import DraftTree

__all__ = [
    "METHODS",
    "ChatSession",
    "DecodingConfig",
    "DraftTree",
    "Drafter",
    "Event",
    "Message",
    "ReplyDone",
    "ReplyStats",
    "SamplingParams",
    "Selector",
    "StepStats",
    "TextDelta",
]
