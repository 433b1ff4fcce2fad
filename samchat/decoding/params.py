"""The knobs of one reply (SamplingParams) and of the decoding engine (DecodingConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from samchat.errors import SamchatError

METHODS = ("plain", "sam", "tr", "sam+tr")


@dataclass
class SamplingParams:
    max_new_tokens: int = 512
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = no top-k cut
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise SamchatError(f"max new tokens must be at least 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise SamchatError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise SamchatError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SamchatError(f"top-k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class DecodingConfig:
    """All engine knobs; the CLI and the TUI settings set these."""

    method: str = "sam+tr"  # plain | sam | tr | sam+tr
    # SAM-Decoding's selection rule: SAM draft when max(dyn, static - l_bias) >= l_threshold.
    l_threshold: int = 5
    l_bias: int = 5
    # Largest draft (nodes); 0 = fitted to the hardware (cost curve, see budget.py).
    max_draft: int = 0
    # Sequence length as in SAM-Decoding: min(max_draft, 1 + alpha * match_len).
    alpha: int = 4
    # Static-index tree drafts (used when the static match wins); 0 = sequence drafts only.
    static_tree_topk: int = 0
    # Choose each draft's size from the measured cost curve and running acceptance rates.
    adaptive: bool = True
    # Trim the oldest turns when the prompt would leave fewer than this many tokens free.
    reserve_tokens: int = 256
    # Tokens of the context a fresh static-index cursor is fed with at the start of a reply.
    static_context: int = 256

    def validate(self) -> None:
        if self.method not in METHODS:
            raise SamchatError(
                f"unknown decoding method {self.method!r}; use one of {', '.join(METHODS)}"
            )
        if self.max_draft < 0:
            raise SamchatError(f"max draft must be >= 0, got {self.max_draft}")
        if self.l_threshold < 0 or self.l_bias < 0 or self.alpha < 1:
            raise SamchatError("l_threshold and l_bias must be >= 0 and alpha >= 1")

    @property
    def uses_sam(self) -> bool:
        return self.method in ("sam", "sam+tr")

    @property
    def uses_tr(self) -> bool:
        return self.method in ("tr", "sam+tr")
