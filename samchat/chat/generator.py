"""What a chat's replies come from: a decoding session over the model loaded here (`Generator`),
or the model's server (samchat.remote's RemoteGenerator); `make_generator` picks.

Runs in worker threads; the session (and torch) is imported when the first reply needs it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeAlias

from samchat.messages import Message

if TYPE_CHECKING:
    import threading

    from samchat.corpus.retrieval import Fitted, Source
    from samchat.decoding.events import Event
    from samchat.decoding.params import DecodingConfig, SamplingParams
    from samchat.decoding.protocols import DraftIndex
    from samchat.decoding.session import ChatSession
    from samchat.engines.costs import CostCurve
    from samchat.models.loader import LoadedModel
    from samchat.remote.client import RemoteModel
    from samchat.remote.replies import RemoteGenerator

    Replies: TypeAlias = "Generator | RemoteGenerator"  # what replies come from


class DraftingSource(Protocol):
    """Where a Generator finds the static index to draft from, at each reply: the corpus'
    BackgroundIndexer (None until its index is open), or a FixedIndex."""

    def drafting_view(self) -> DraftIndex | None: ...


def make_generator(
    lm: LoadedModel | RemoteModel,
    decoding: DecodingConfig,
    indexer: DraftingSource | None = None,
    cost_curve: CostCurve | None = None,
    cache_dir: Path | None = None,
    measure_first: bool = True,
) -> Generator | RemoteGenerator:
    """What replies come from: a decoding session here, or the model's server."""
    from samchat.remote.client import RemoteModel

    if isinstance(lm, RemoteModel):
        from samchat.remote.replies import RemoteGenerator

        return RemoteGenerator(lm)
    return Generator(lm, decoding, indexer, cost_curve, cache_dir, measure_first)


class Generator:
    """One decoding session per loaded model and config (the session keeps the KV cache).

    With a background indexer the session drafts from the static index once it is open, through
    a view of its flushed segments: they never change under a reply, so a reply takes no lock
    and never waits for a sync, however large (an import, a first index of many chats).
    """

    def __init__(
        self,
        lm: LoadedModel,
        decoding: DecodingConfig,
        indexer: DraftingSource | None = None,
        cost_curve: CostCurve | None = None,
        cache_dir: Path | None = None,
        measure_first: bool = True,
    ) -> None:
        """measure_first=False: a machine whose costs are not measured yet gets plain replies
        at once, and the front end calls measure_cost_curve() when a reply is done."""
        self.lm = lm
        decoding.validate()
        self.decoding = decoding
        self.indexer = indexer
        self.cost_curve = cost_curve  # None: the session measures (and caches) it
        self.cache_dir = cache_dir  # measured costs and Token Recycling's table live here
        self.measure_first = measure_first
        self._session: ChatSession | None = None
        self._session_has_index = False

    def _index(self) -> DraftIndex | None:
        return self.indexer.drafting_view() if self.indexer is not None else None

    def session(self) -> ChatSession:
        index = self._index()
        if self._session is None:
            from samchat.decoding.session import ChatSession

            self._session = ChatSession(
                self.lm,
                self.decoding,
                index,
                cost_curve=self.cost_curve,
                cache_dir=self.cache_dir,
                measure_first=self.measure_first,
            )
            self._session_has_index = index is not None
        elif index is not None and not self._session_has_index:
            # The indexer opened after the session was made: draft from it from now on.
            self._session.static_index = index
            self._session_has_index = True
        return self._session

    def prepare(self) -> None:
        """Build the session now, and (measure_first) its verification-cost curve: slow the
        first time on a machine, so that the first reply does not pay for it."""
        session = self.session()
        if self.measure_first and self.decoding.method != "plain":
            session.measure_cost_curve()

    def curve_missing(self) -> bool:
        """A reply ran plainly because this machine's costs are not measured yet."""
        return self._session is not None and bool(self._session.curve_missing)

    def measure_cost_curve(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Time this machine once (about a minute on a small CPU), so that replies draft;
        `cancelled()` true stops it (MeasurementCancelled, nothing kept)."""
        self.session().measure_cost_curve(cancelled)

    def fit_sources(
        self,
        history: list[Message],
        question: str,
        sources: list[Source],
        sampling: SamplingParams,
    ) -> Fitted:
        """The user message with the sources this model's context holds after `history`."""
        from samchat.corpus.retrieval import fit_to_session

        return fit_to_session(self.session(), history, question, sources, sampling.max_new_tokens)

    def generate(
        self, messages: list[Message], sampling: SamplingParams, cancel: threading.Event
    ) -> Iterator[Event]:
        yield from self.session().generate(messages, sampling, cancel)  # it checks sampling


class FixedIndex:
    """What Generator drafts from when the caller holds the static index itself (`samchat
    ask`: one process, one reply, no background thread)."""

    def __init__(self, index: DraftIndex) -> None:
        self.index = index

    def drafting_view(self) -> DraftIndex:
        return self.index
