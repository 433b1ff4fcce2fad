"""The names that cross modules as strings, each declared once as a Literal type: the drafters
and what a step drafted from, the decoding methods, why a reply ended, and how the torch engine
runs its steps. Stored rows and servers may hold other strings: their readers keep those as
plain `str` (samchat.figures)."""

from __future__ import annotations

from typing import Literal, TypeVar, get_args

N = TypeVar("N", bound=str)

# The short forms are what users type and stored rows hold; code names them by the constants
# below (DYNAMIC_SAM, ...).
DrafterName = Literal["dyn", "static", "tr"]  # dynamic SAM, static SAM, Token Recycling
SamDrafter = Literal["dyn", "static"]
# What one step drafted from: a drafter, a SAM sequence merged with a Token Recycling tree, or
# nothing (a plain step).
DraftSource = Literal["dyn", "static", "tr", "dyn+tr", "static+tr", "plain"]
# Which drafter proposed a committed token ("plain": none, the model's own; "remote": a server's).
TokenSource = Literal["dyn", "static", "tr", "plain", "remote"]
Method = Literal["plain", "sam", "tr", "sam+tr"]
# Why a local reply ended. A remote one may also end "interrupted" or as its server says.
FinishReason = Literal["eos", "stop", "length", "cancelled", "context"]
# The torch engine's steps: each its own shapes, fixed shapes replayed as CUDA graphs, the same
# fixed shapes run eagerly (how tests check that path on a CPU), or graphs wherever they can run.
StepMode = Literal["dynamic", "graphs", "static", "auto"]

DRAFTERS: tuple[DrafterName, ...] = get_args(DrafterName)
METHODS: tuple[Method, ...] = get_args(Method)
STEP_MODES: tuple[StepMode, ...] = get_args(StepMode)
DYNAMIC_SAM: DrafterName = "dyn"  # the conversation's own automaton
STATIC_SAM: DrafterName = "static"  # the static index of chats and documents
TOKEN_RECYCLING: DrafterName = "tr"


def named(value: str, names: tuple[N, ...]) -> N:
    """`value` as one of `names` (a command line's or a file's string, checked where it is
    read); ValueError if it is none of them."""
    for name in names:
        if name == value:
            return name
    raise ValueError(f"{value!r} is not one of {', '.join(names)}")


_MERGED: dict[DraftSource, DraftSource] = {DYNAMIC_SAM: "dyn+tr", STATIC_SAM: "static+tr"}


def merged_source(sam: DraftSource) -> DraftSource:
    """A SAM draft of `sam` ("dyn" or "static") merged with a Token Recycling tree."""
    return _MERGED[sam]
