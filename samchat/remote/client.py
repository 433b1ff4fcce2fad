"""Talking to an OpenAI-compatible server through the `openai` package: the model list, the
model a source names, and every fault as one line that says what to do."""

from __future__ import annotations

import hashlib
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from samchat.errors import ModelLoadError, SamchatError
from samchat.models.catalog import ModelEntry
from samchat.remote import REMOTE
from samchat.remote.aio import Cancelled, PrivateLoop
from samchat.remote.endpoint import Endpoint, RemoteSource

if TYPE_CHECKING:
    import openai

CONNECT_S = 10.0  # seconds to reach the server before giving up
LIST_S = 30.0  # the most a model list may take: it is asked before anything else can happen


def _never() -> bool:
    return False


class RemoteError(SamchatError):
    """A remote server could not be reached or refused a request."""


@dataclass(frozen=True)
class RemoteModel:
    """A model served elsewhere: what the front ends hold in place of a loaded model. It has
    no tokenizer and no weights here, so there is no static index and no drafting here."""

    endpoint: Endpoint
    model_id: str  # as the server names it
    engine: str = REMOTE
    dtype: str = ""
    tokenizer: None = None

    @property
    def name(self) -> str:
        """The model's name; a server that names it by a file path is shown the file's name."""
        return PurePosixPath(self.model_id).name if "/" in self.model_id else self.model_id

    @property
    def device(self) -> str:
        return self.endpoint.host

    @property
    def source(self) -> str:
        return RemoteSource(self.endpoint, self.model_id).text

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.endpoint.url}#{self.model_id}".encode()).hexdigest()[:16]

    @property
    def context_limit(self) -> int:
        return self.endpoint.context


def _timeout(endpoint: Endpoint, read_s: float | None) -> openai.Timeout:
    import openai

    return openai.Timeout(read_s or endpoint.timeout_s, connect=CONNECT_S)


def async_client(endpoint: Endpoint, read_s: float | None = None) -> openai.AsyncOpenAI:
    """An `openai` client for `endpoint`, run on a PrivateLoop so that a cancel drops its
    connection at once: no retries (a fault is reported at once), a short connect timeout and
    the endpoint's read timeout. The package insists on a key; a server without one ignores
    the header."""
    import openai

    return openai.AsyncOpenAI(
        base_url=endpoint.url,
        api_key=endpoint.key() or "none",
        max_retries=0,
        timeout=_timeout(endpoint, read_s),
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and what caused it, explicitly or not, outermost first (the client wraps the
    socket's error two or three times)."""
    out = [exc]
    while (nxt := out[-1].__cause__ or out[-1].__context__) is not None and len(out) < 12:
        out.append(nxt)
    return out


def _first_line(text: object) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line[:200]


def explain(exc: BaseException, endpoint: Endpoint, model: str | None = None) -> str:
    """One line for a fault talking to `endpoint`: what happened and what to do."""
    import openai

    where = endpoint.label
    chain = _chain(exc)
    root = chain[-1]
    if isinstance(exc, openai.APITimeoutError) or any(isinstance(e, TimeoutError) for e in chain):
        return (
            f"{where} did not answer within {endpoint.timeout_s:g} s; check the server, or raise "
            "timeout in its [endpoints] entry of config.toml"
        )
    if isinstance(exc, openai.AuthenticationError):
        return f"{where} refused the API key (401); {endpoint.key_hint()}"
    if isinstance(exc, openai.PermissionDeniedError):
        return f"{where} denied access (403): {_detail(exc)}; check the key's permissions"
    if isinstance(exc, openai.NotFoundError):
        if model:
            return f"{where} has no model {model!r} (404); `samchat models` lists what it serves"
        return f"{where} answered 404: {_detail(exc)}; check the URL (it usually ends in /v1)"
    if isinstance(exc, openai.APIStatusError):
        return f"{where} answered {exc.status_code}: {_detail(exc)}"
    if isinstance(exc, openai.APIResponseValidationError) or _not_json(root):
        return not_openai(endpoint)
    tls = next((e for e in chain if isinstance(e, ssl.SSLError)), None)
    if tls is not None or any("certificate" in str(e).lower() for e in chain):
        return (
            f"TLS failed with {where}: {_first_line(tls or root)}; use http:// for a server "
            "without TLS, or install the server's certificate"
        )
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return f"{where} refused the connection; is the server running on {endpoint.host}?"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return f"cannot find the host {endpoint.host} (DNS); check the URL"
    if isinstance(exc, openai.APIConnectionError):
        return f"cannot reach {where}: {_first_line(root) or type(root).__name__}"
    return f"{where}: {type(root).__name__}: {_first_line(root)}"


def not_openai(endpoint: Endpoint) -> str:
    return (
        f"{endpoint.label} did not answer as an OpenAI-compatible server does; check the URL "
        "(the API root, such as http://host:8000/v1)"
    )


def _detail(exc: openai.APIStatusError) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        message = body.get("message") or (body.get("error") or {}).get("message")
        if isinstance(message, str) and message:
            return _first_line(message)
    return _first_line(getattr(exc, "message", "") or exc)


def _not_json(exc: BaseException) -> bool:
    return isinstance(exc, ValueError) and "json" in type(exc).__name__.lower() + str(exc).lower()


def list_models(endpoint: Endpoint, cancelled: Callable[[], bool] = _never) -> list[str]:
    """The ids of the models `endpoint` serves (its /models), asked with a read timeout of at
    most LIST_S. RemoteError with one line; also when `cancelled()` turns true meanwhile."""
    with PrivateLoop() as aio:
        try:
            api = async_client(endpoint, read_s=min(endpoint.timeout_s, LIST_S))
            aio.closing(api.close)
            raw = aio.run(api.models.with_raw_response.list(), cancelled)
            if "json" not in raw.headers.get("content-type", ""):
                raise RemoteError(not_openai(endpoint))
            page = raw.parse()
            return [str(m.id) for m in page.data]
        except SamchatError:
            raise
        except Cancelled:
            raise RemoteError(f"stopped asking {endpoint.label} for its models") from None
        except (AttributeError, TypeError, KeyError, ValueError):  # JSON, but no model list
            raise RemoteError(not_openai(endpoint)) from None
        except Exception as exc:
            raise RemoteError(explain(exc, endpoint)) from None


def connect(
    source: RemoteSource,
    progress: Callable[[str], None],
    cancelled: Callable[[], bool] = _never,
) -> RemoteModel:
    """The model `source` names, checked against the server's list; without a name, the
    server's only model (or its first, said so). A fault is a one-line ModelLoadError."""
    endpoint = source.endpoint
    progress(f"asking {endpoint.label} for its models")
    try:
        ids = list_models(endpoint, cancelled)
    except SamchatError as exc:
        raise ModelLoadError(str(exc)) from None
    if not ids:
        raise ModelLoadError(f"{endpoint.label} serves no model; load one there first")
    if source.model is None:
        if len(ids) > 1:
            progress(f"using {ids[0]}, the first of {len(ids)}; name another with #MODEL")
        return RemoteModel(endpoint, ids[0])
    if source.model not in ids:
        listed = ", ".join(ids[:8]) + (", …" if len(ids) > 8 else "")
        raise ModelLoadError(f"{endpoint.label} has no model {source.model!r}; it serves: {listed}")
    return RemoteModel(endpoint, source.model)


def endpoint_models(
    endpoints: Mapping[str, Endpoint], cancelled: Callable[[], bool] = _never
) -> tuple[list[ModelEntry], list[str]]:
    """The models of every configured endpoint, as `samchat models` and the model screen list
    them (source `openai:NAME#MODEL`), and one line for each endpoint that did not answer."""
    entries: list[ModelEntry] = []
    problems: list[str] = []
    for name, endpoint in endpoints.items():
        try:
            ids = list_models(endpoint, cancelled)
        except SamchatError as exc:
            problems.append(str(exc))
            continue
        for model_id in ids:
            remote = RemoteModel(endpoint, model_id)
            entries.append(
                ModelEntry(remote.source, remote.name, f"endpoint {name}", REMOTE, endpoint.url)
            )
    return entries, problems
