"""The knobs of one reply (SamplingParams) and of the decoding engine (DecodingConfig).

This is the one declaration of every knob: each field carries its help text and its rules
(bounds, choices), written with `knob()` (the framework: samchat/decoding/knobs.py). Adding a
knob is one line in a dataclass below plus the code that uses it.

No torch here (nor in `samchat.decoding`'s package import): the UI and the CLI import this
module at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

# The framework's names the app's settings form imports from here.
from samchat.decoding.knobs import Knob as Knob
from samchat.decoding.knobs import KnobError as KnobError
from samchat.decoding.knobs import from_mapping as from_mapping
from samchat.decoding.knobs import knob, validate_knobs
from samchat.decoding.knobs import knobs as knobs
from samchat.decoding.knobs import to_mapping as to_mapping
from samchat.names import METHODS as METHODS  # re-exported: where the knob lists them
from samchat.names import Method


@dataclass(frozen=True)
class SamplingParams:
    """The knobs of one reply: frozen, and validated once, when made (KnobError, one line)."""

    SECTION: ClassVar[str] = "sampling"

    max_new_tokens: int = knob(512, "longest reply, in tokens", minimum=1)
    temperature: float = knob(
        0.0, "0 = greedy (lossless: same text as plain decoding)", minimum=0.0
    )
    top_p: float = knob(1.0, "nucleus sampling mass (1 = off)", exclusive_minimum=0.0, maximum=1.0)
    top_k: int = knob(0, "sample among the k likeliest (0 = off)", minimum=0)
    # torch.Generator seed: the same seed gives the same tokens, whatever the method.
    seed: int | None = knob(
        None, "fixed sampling seed (unset = random)", minimum=0, maximum=2**64 - 1
    )
    stop: tuple[str, ...] = knob((), "the reply ends before the first of these strings")

    def __post_init__(self) -> None:
        validate_knobs(self)

    def validate(self) -> None:
        """KnobError (a SamchatError, one line) for the first bad value."""
        validate_knobs(self)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class DecodingConfig:
    """All engine knobs; the CLI and the TUI settings set these."""

    SECTION: ClassVar[str] = "decoding"

    # A Literal of samchat.names, which ruff cannot tell immutable: knob() returns the default.
    method: Method = knob("sam+tr", "none, SAM, Token Recycling (TR) or both", choices=METHODS)  # noqa: RUF009
    # SAM-Decoding's selection rule: SAM draft when max(dyn, static - l_bias) >= l_threshold.
    l_threshold: int = knob(5, "shortest suffix match that the SAM drafters trust", minimum=0)
    l_bias: int = knob(5, "match length above which SAM drafts win over Token Recycling", minimum=0)
    # Largest draft (nodes); 0 = fitted to the hardware (cost curve, see samchat.decoding.policy).
    max_draft: int = knob(
        0, "most draft tokens verified per step (0 = fitted to the hardware)", minimum=0
    )
    # Sequence length as in SAM-Decoding: min(max_draft, 1 + alpha * match_len).
    alpha: int = knob(4, "SAM draft length: 1 + alpha × match length (up to max_draft)", minimum=1)
    # Static-index tree drafts (used when the static match wins); 0 = sequence drafts only.
    static_tree_topk: int = knob(
        0, "tree drafts from the static index (0 = sequences only)", minimum=0
    )
    # Choose each draft's size from the measured cost curve and running acceptance rates.
    adaptive: bool = knob(True, "size drafts from measured costs and hit rates")
    # Trim the oldest turns when the prompt would leave fewer than this many tokens free.
    reserve_tokens: int = knob(256, "drop old turns to keep this room for the reply", minimum=0)
    # Tokens of the context a fresh static-index cursor is fed with at the start of a reply
    # (at least 1: the drafter feeds context[-static_context:], and [-0:] is all of it).
    static_context: int = knob(256, "prompt tokens fed to the static index per reply", minimum=1)

    def validate(self) -> None:
        """KnobError (a SamchatError, one line) for the first bad value."""
        validate_knobs(self)

    @property
    def uses_sam(self) -> bool:
        return self.method in ("sam", "sam+tr")

    @property
    def uses_recycling(self) -> bool:
        return self.method in ("tr", "sam+tr")
