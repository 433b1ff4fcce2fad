"""Opening the model a chat front end asks for: loaded here, or found on its server.

Runs in worker threads; torch/transformers are imported lazily inside, so starting the UI stays
fast.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Mapping

    from samchat.models.loader import LoadedModel, ModelSpec
    from samchat.remote.client import RemoteModel
    from samchat.remote.endpoint import Endpoint

    Model: TypeAlias = "LoadedModel | RemoteModel"  # run here, or by a server


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
    from samchat.sources import is_remote

    if is_remote(spec.source):
        from samchat.remote.client import connect
        from samchat.remote.endpoint import parse_source

        assert spec.source is not None
        return connect(parse_source(spec.source, endpoints or {}), progress, cancelled)
    from samchat.models import load_model

    return load_model(spec, progress=progress, recent=recent)
