"""The names that cross modules as strings, each declared once as a Literal type: the drafters
and what a step drafted from, the decoding methods, why a reply ended, and how the torch engine
runs its steps. Stored rows and servers may hold other strings: their readers keep those as
plain `str` (samchat.figures)."""

from __future__ import annotations

from typing import Literal, get_args

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
# The torch engine's steps: each its own shapes, fixed shapes replayed as CUDA graphs, or
# graphs wherever they can run.
StepMode = Literal["dynamic", "graphs", "auto"]

DRAFTERS: tuple[DrafterName, ...] = get_args(DrafterName)
METHODS: tuple[Method, ...] = get_args(Method)
STEP_MODES: tuple[StepMode, ...] = get_args(StepMode)


def merged_source(sam: SamDrafter) -> DraftSource:
    """A SAM draft of `sam` merged with a Token Recycling tree."""
    return "dyn+tr" if sam == "dyn" else "static+tr"
