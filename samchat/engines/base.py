"""The interface ChatSession drives: the model's operations (Engine) and, handed out by the
engine, its measuring and description (EngineMeter). An engine owns one KV cache (one
conversation); the weights belong to the LoadedModel and are shared by every engine made from
it, as are the cost curves measured for them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from samchat.engines.costs.cache import CurveMemo
    from samchat.engines.costs.curve import CostCurve
    from samchat.engines.layout import TreeLayout

# Logits rows (rows, vocab), float32 numpy on the host: the drafters, the sampler and
# verification read them there whichever engine runs, so the decoding loop needs no tensor
# library of its own (and the CLI's import of this module no numpy).
Logits: TypeAlias = "npt.NDArray[np.float32]"


# Where a model can run; the command line's --device adds "auto" (samchat.models.device).
DEVICE_TYPES = ("cpu", "cuda", "mps")

# The most rows one verification forward takes: the pending token and a draft of at most
# DRAFT_ROWS - 1 nodes. The engines' fast paths and the cost curve cover this many; the policy
# (samchat.decoding.policy) keeps drafts within it. Declared here: engines import no decoding.
DRAFT_ROWS = 64


class EngineModel(Protocol):
    """A loaded model as the registry opens an engine on it (a samchat.models LoadedModel, or a
    test's stand-in); each engine reads its own weights object from it besides."""

    @property
    def engine(self) -> str: ...  # the registry's name of the engine that runs it

    @property
    def model(self) -> object: ...  # its weights: only that engine reads them, by its own type

    @property
    def name(self) -> str: ...

    @property
    def context_limit(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def curves(self) -> CurveMemo: ...  # the cost curves measured for these weights


class ReadStopped(Exception):
    """A prefill stopped midway by Engine.stop_reading() (the reply was cancelled)."""


class Engine(Protocol):
    """Rows of the KV cache are tokens at consecutive positions 0..length-1.

    forward() appends its inputs at positions length + depth (depth 0 for a plain or sequence
    input's first token, the tree depth for a tree); commit() then keeps the accepted inputs.
    """

    name: str  # "torch" | "llamacpp"
    device_type: str  # where the model runs: "cpu", "cuda" or "mps"
    # Tokens a session prefills per call: a long prompt is read in such pieces, so that it
    # shows progress and can be cancelled between them.
    prefill_chunk: int
    # The most inputs one forward takes whose rows still equal one-token decoding's: drafts
    # are kept below it.
    exact_rows: int
    # Why drafting is limited (None = trees and sequences both work).
    plain_reason: str | None
    tree_reason: str | None
    # Why greedy speculative output may differ from plain decoding here (None = identical).
    inexact_reason: str | None

    @property
    def length(self) -> int: ...

    def reset(self) -> None: ...

    def crop(self, length: int) -> None:
        """Keep the first `length` rows."""

    def plan_read(self, cached: int, new: int) -> None:
        """Before a prompt's `new` tokens are read after `cached` kept ones: the engine may lay
        out its cache for that read, emptying it (the session then reads the whole prompt)."""

    def prefill(self, ids: list[int], logits: int = 0) -> Logits | None:
        """Append ids to the cache, by the same kernels whether or not logits are asked for;
        with logits > 0, return those of the last `logits` ids (rows, vocab) float32."""

    def stop_reading(self) -> None:
        """From any thread: a prefill() in progress stops as soon as it can, raising
        ReadStopped and keeping only whole pieces (a no-op where a read cannot stop midway:
        the session still stops between pieces)."""

    def forward(self, ids: list[int], layout: TreeLayout | None = None) -> Logits:
        """Logits (len(ids), vocab) float32, one row per input. With a layout, ids are
        [pending] + tree tokens and input i attends to the cache and its tree ancestors."""

    def commit(self, start: int, keep: list[int]) -> None:
        """After forward() at cache length `start`: keep inputs keep[0] < keep[1] < ... (an
        accepted path, 0 first) as rows start, start + 1, ...; drop the other inputs."""

    @property
    def meter(self) -> EngineMeter:
        """Its measuring and description."""
        ...


class EngineMeter(Protocol):
    """What an engine hands out for measuring it and describing it: the session fits kernels and
    reads the cost curve before a reply; doctor and the benchmarks show the description."""

    def fit(self, measure: bool = True) -> None:
        """Before a reply: choose kernels by measurement where the engine has a choice (once
        per model and machine, then cached); a no-op where it has none. measure=False takes
        what is cached, else the default kernels, and never measures."""

    def cost_curve(self, cancelled: Callable[[], bool] | None = None) -> CostCurve:
        """The relative cost of verifying n inputs in one forward, on this machine (measured
        once per model and machine, then cached). A measurement stops, raising
        MeasurementCancelled, once `cancelled()` is true."""

    def cached_cost_curve(self) -> CostCurve | None:
        """cost_curve() if it is known already (in this process or cached on disk), else
        None: never measures."""

    def describe(self) -> str:
        """One line for `samchat doctor` and benchmark metadata: engine, version, kernels."""
