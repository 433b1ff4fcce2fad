"""Documents as a chat front end uses them: the background indexer that keeps the static index
in step with the store, the sources a question is given, and importing files. Each opens its own
store connection where it needs one: these run in worker threads."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from samchat.errors import SamchatError

if TYPE_CHECKING:
    from samchat.corpus.indexing import BackgroundIndexer
    from samchat.corpus.retrieval import Source
    from samchat.corpus.rule import RetrievalRule
    from samchat.models.loader import LoadedModel
    from samchat.remote.client import RemoteModel


def start_indexer(
    lm: LoadedModel | RemoteModel,
    db_path: Path,
    on_error: Callable[[Exception], None],
    on_progress: Callable[[int, int, str], None] | None = None,
) -> BackgroundIndexer | None:
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
    return summary.describe()
