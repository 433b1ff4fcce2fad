"""The body of the app's model worker: the model opened as asked (on the engine measured
fastest here where the engine is left to auto; with no record yet, the engines are measured
after its first answer), its static indexer started and its replies' generator prepared,
posted back to the app as ModelLoaded or ModelFailed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.chat.documents import start_indexer
from samchat.chat.generator import make_generator
from samchat.chat.opening import open_model
from samchat.errors import SamchatError
from samchat.models.engine_choice import preferred, why
from samchat.models.engine_trial import Trial
from samchat.models.loader import LoadedModel
from samchat.tui.worker_messages import (
    IndexProgress,
    ModelFailed,
    ModelLoaded,
    ModelProgress,
    Notice,
)

if TYPE_CHECKING:
    from textual.message import Message

    from samchat.chat.opening import Model
    from samchat.corpus.indexing import BackgroundIndexer
    from samchat.decoding.params import DecodingConfig
    from samchat.engines.costs.curve import CostCurve
    from samchat.models.loader import ModelSpec
    from samchat.remote.endpoint import Endpoint

Post = Callable[["Message"], object]


def start_static_indexer(post: Post, lm: Model, db_path: Path | None) -> BackgroundIndexer | None:
    """Keeps the static index in step with the store (own thread, own connection); None when
    there is no store or it cannot start (decoding works without it)."""
    if db_path is None:
        return None

    def failed(exc: Exception) -> None:  # runs in the indexer's thread
        post(Notice(f"static index: {exc}", "Index"))

    def progress(done: int, total: int, _what: str) -> None:  # the indexer's thread
        post(IndexProgress(done, total))

    try:
        return start_indexer(lm, db_path, failed, progress)
    except Exception as exc:  # decoding still works without the static index
        post(Notice(f"static index unavailable: {exc}", "Index"))
        return None


def load(
    post: Post,
    spec: ModelSpec,
    picked: bool,
    decoding: DecodingConfig,
    *,
    cache_dir: Path | None,
    cost_curve: CostCurve | None,
    endpoints: Mapping[str, Endpoint],
    recent: Path,
    db_path: Path | None,
    cancelled: Callable[[], bool],
) -> None:
    """In a thread worker; `cancelled()`: the app is closing."""

    def progress(text: str) -> None:
        post(ModelProgress(text))

    # The engine and format measured fastest here, where spec leaves them to auto (kept in the
    # cache by samchat bench engines; never written to config.toml).
    resolved = preferred(spec, cache_dir) if cache_dir is not None else spec
    try:
        lm = open_model(resolved, progress, endpoints, recent, cancelled=cancelled)
    except SamchatError as exc:
        post(ModelFailed(str(exc)))
        return
    except Exception as exc:
        post(ModelFailed(f"could not load the model: {type(exc).__name__}: {exc}"))
        return
    if isinstance(lm, LoadedModel):  # the status bar says why; the reply worker measures
        lm.engine_note = why(spec, lm.engine, cache_dir)
        lm.trial = Trial.owed(spec, cache_dir, lm)
    indexer = start_static_indexer(post, lm, db_path)
    # Replies draft on the machine's kept cost curve (make setup measures the default model's);
    # where none is kept yet, the first reply decodes plainly and the machine is timed after.
    generator = make_generator(lm, decoding, indexer, cost_curve, cache_dir, measure_first=False)
    warning = ""
    try:
        generator.prepare()
    except Exception as exc:  # the next reply reports it again; the model itself is fine
        warning = f"decoder setup failed: {exc}"
    post(ModelLoaded(lm, generator, indexer, spec, picked, warning))
