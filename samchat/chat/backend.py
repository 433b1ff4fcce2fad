"""The front ends' thin adapter over the library: store, model loading, decoding, import.

No textual here. torch/transformers are imported lazily inside the functions that run in
worker threads, so starting the UI stays fast.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from samchat.errors import SamchatError, StoreError
from samchat.messages import Message

if TYPE_CHECKING:
    from collections.abc import Mapping

    from samchat.corpus.retrieval import Fitted, Source
    from samchat.corpus.rule import RetrievalRule
    from samchat.decoding.events import Event
    from samchat.decoding.params import DecodingConfig, SamplingParams
    from samchat.models.loader import LoadedModel, ModelSpec
    from samchat.remote.client import RemoteModel
    from samchat.remote.endpoint import Endpoint
    from samchat.remote.replies import RemoteGenerator
    from samchat.store import Chat, MessageRow, SearchHit, Store

    Model: TypeAlias = "LoadedModel | RemoteModel"  # run here, or by a server
    Replies: TypeAlias = "Generator | RemoteGenerator"  # what replies come from


class ChatData:
    """The store as the UI uses it. Every failure becomes a SamchatError (shown as a notice)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    def open(cls, path: Path) -> ChatData:
        from samchat.store import Store

        try:
            return cls(Store.open(path))
        except sqlite3.Error as exc:  # the store translates most; be safe on the UI path
            raise StoreError(f"cannot open the database: {exc}") from exc

    @property
    def path(self) -> Path:
        return self.store.path

    def chats(self) -> list[Chat]:
        return self.store.chats(limit=500)

    def chat(self, chat_id: int) -> Chat:
        return self.store.chat(chat_id)

    def search(self, query: str) -> list[SearchHit]:
        return self.store.search(query, limit=50, kinds=("message",), mark=("\x02", "\x03"))

    def create_chat(self, title: str, model: str | None) -> int:
        return self.store.create_chat(title or "New chat", model)

    def rename_chat(self, chat_id: int, title: str) -> None:
        self.store.rename_chat(chat_id, title)

    def delete_chat(self, chat_id: int) -> None:
        self.store.delete_chat(chat_id)

    def set_system_prompt(self, chat_id: int, prompt: str | None) -> None:
        self.store.set_system_prompt(chat_id, prompt or None)

    def thread(self, chat_id: int, leaf_id: int | None = None) -> list[MessageRow]:
        return self.store.thread(chat_id, leaf_id)

    def message(self, message_id: int) -> MessageRow:
        return self.store.message(message_id)

    def branches(self, rows: list[MessageRow]) -> dict[int, tuple[int, int]]:
        """(index, count) among siblings for each message that has alternatives.

        One query for the whole chat: a sibling lookup per message made long chats slow."""
        if not rows:
            return {}
        by_parent: dict[int | None, list[int]] = {}
        for message in self.store.messages(rows[0].chat_id):  # oldest first, as siblings()
            by_parent.setdefault(message.parent_id, []).append(message.id)
        out: dict[int, tuple[int, int]] = {}
        for row in rows:
            ids = by_parent.get(row.parent_id, [row.id])
            if len(ids) > 1 and row.id in ids:
                out[row.id] = (ids.index(row.id) + 1, len(ids))
        return out

    def sibling(self, message_id: int, step: int) -> int | None:
        """The id of the alternative `step` places away (wrapping), or None if there is none."""
        sibs = [s.id for s in self.store.siblings(message_id)]
        if len(sibs) < 2:
            return None
        return sibs[(sibs.index(message_id) + step) % len(sibs)]

    def add_user(self, chat_id: int, content: str, parent_id: int | None) -> int:
        return self.store.add_message(chat_id, "user", content, parent_id)

    def add_reply(
        self,
        chat_id: int,
        content: str,
        parent_id: int,
        model: str,
        stats: dict[str, Any],
        finish_reason: str,
    ) -> int:
        from samchat.chat.record import save_reply

        return save_reply(
            self.store,
            chat_id,
            parent_id,
            content,
            model=model,
            stats=stats,
            finish_reason=finish_reason,
        )

    def conversation(self, chat_id: int, leaf_id: int) -> list[Message]:
        """The model's messages for the branch ending at `leaf_id` (a user message)."""
        chat = self.store.chat(chat_id)
        out: list[Message] = []
        if chat.system_prompt:
            out.append({"role": "system", "content": chat.system_prompt})
        for row in self.store.thread(chat_id, leaf_id):
            out.append({"role": row.role, "content": row.content})
            if row.id == leaf_id:
                break
        return out


# -- model and decoding (run in worker threads) -------------------------------------------------


def open_model(
    spec: ModelSpec,
    progress: Callable[[str], None],
    endpoints: Mapping[str, Endpoint] | None = None,
    recent: Path | None = None,
    cancelled: Callable[[], bool] = lambda: False,
) -> LoadedModel | RemoteModel:
    """The model `spec` names: loaded here, or (an `openai:` source) found on its server,
    which `cancelled()` abandons at once. endpoints: config.toml's [endpoints]; recent: the
    list of GGUF files loaded before."""
    from samchat.remote.endpoint import is_remote

    if is_remote(spec.source):
        from samchat.remote.client import connect
        from samchat.remote.endpoint import parse_source

        assert spec.source is not None
        return connect(parse_source(spec.source, endpoints or {}), progress, cancelled)
    from samchat.models import load_model

    return load_model(spec, progress=progress, recent=recent)


def make_generator(
    lm: LoadedModel | RemoteModel,
    decoding: DecodingConfig,
    indexer: Any = None,
    cost_curve: Any = None,
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
        indexer: Any = None,
        cost_curve: Any = None,
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
        self._session: Any = None
        self._session_has_index = False

    def _index(self) -> Any:
        return self.indexer.drafting_view() if self.indexer is not None else None

    def session(self) -> Any:
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
            self._session.set_static_index(index)
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
        self, messages: list[Message], sampling: SamplingParams, cancel: Any
    ) -> Iterator[Event]:
        yield from self.session().generate(messages, sampling, cancel)  # it checks sampling


class FixedIndex:
    """What Generator drafts from when the caller holds the static index itself (`samchat
    ask`: one process, one reply, no background thread)."""

    def __init__(self, index: Any) -> None:
        self.index = index

    def drafting_view(self) -> Any:
        return self.index


def start_indexer(
    lm: LoadedModel | RemoteModel,
    db_path: Path,
    on_error: Callable[[Exception], None],
    on_progress: Callable[[int, int, str], None] | None = None,
) -> Any:
    """A BackgroundIndexer that keeps this tokenizer's static index in step with the store;
    None for a remote model (no tokenizer here, and nothing here drafts)."""
    from samchat.corpus.indexing import BackgroundIndexer, tokenizer_codec

    if lm.tokenizer is None:
        return None

    encode, separator = tokenizer_codec(lm.tokenizer)
    return BackgroundIndexer(
        db_path,
        lm.fingerprint,
        encode,
        separator,
        model=lm.name,
        on_error=on_error,
        on_progress=on_progress,
    ).start()


def gather_sources(
    store_path: Path,
    question: str,
    *,
    retrieval: bool,
    files: list[Path],
    rule: RetrievalRule | None = None,
    model: str | None = None,
) -> list[Source]:
    """Attached files, then (with `retrieval`) the passages that best answer `question` by
    `rule` (config.toml's [documents]), read at `model`'s measured prefill speed. Own
    connection: this runs in a worker thread. DocumentError for a bad file or an empty
    corpus."""
    from samchat.corpus.retrieval import read_attachment, retrieve
    from samchat.store import Store

    sources = [read_attachment(path) for path in files]
    if retrieval:
        with Store.open(store_path) as store:
            speed = store.prefill_speed(model) if model else None
            sources += retrieve(store, question, rule, speed)
    return sources


def import_documents(path: str, store_path: Path, progress: Callable[[int, int, str], None]) -> str:
    """Import a file or folder into the store (own connection: this runs in a worker thread)."""
    target = Path(path).expanduser()
    if not target.exists():  # before the (slow) reader imports
        raise SamchatError(f"{path} does not exist; give the path of a file or folder")
    from samchat.corpus.importer import import_paths
    from samchat.store import Store

    store = Store.open(store_path)
    try:
        summary = import_paths(
            store, [target], progress=lambda done, total, p: progress(done, total, p.name)
        )
    finally:
        store.close()
    for skipped, reason in summary.skipped:
        progress(1, 1, f"skipped {skipped.name}: {reason}")
    parts = [f"imported {len(summary.documents)} documents"]
    if summary.chats:
        parts.append(f"{summary.chats} chats")
    if summary.duplicates:
        parts.append(f"{len(summary.duplicates)} already there")
    if summary.skipped:
        parts.append(f"{len(summary.skipped)} skipped")
    return ", ".join(parts) + f" in {summary.seconds:.1f} s"
