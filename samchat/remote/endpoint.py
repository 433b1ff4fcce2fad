"""Where a remote model lives: `openai:URL[#MODEL]` or `openai:NAME[#MODEL]` for an endpoint
declared in config.toml, and the API key it is sent (never from the command line, where any
user of the machine could read it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from samchat.errors import SamchatError
from samchat.sources import REMOTE_PREFIX

# The key for a server named by URL that no [endpoints] entry describes.
KEY_ENV = "SAMCHAT_API_KEY"
TIMEOUT_S = 120.0  # seconds without a byte from the server (a long prompt may read slowly)
CONTEXT = 8192  # tokens assumed for the server's context when fitting documents in


class EndpointError(SamchatError):
    """A remote source or an [endpoints] entry that cannot be used."""


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server. `name` is its config.toml name ("" for a bare URL)."""

    url: str
    name: str = ""
    api_key: str = field(default="", repr=False)  # in config.toml itself (api_key_env is better)
    api_key_env: str = ""  # the environment variable that holds the key
    timeout_s: float = TIMEOUT_S
    context: int = CONTEXT

    @property
    def label(self) -> str:
        return self.name or self.url

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc or self.url

    def key(self) -> str:
        """The key to send ("" for none): the entry's, else its variable's; a bare URL (no
        entry) gets $SAMCHAT_API_KEY's. A variable the entry names but the environment lacks is
        an error."""
        if self.api_key:
            return self.api_key
        if self.api_key_env:
            value = os.environ.get(self.api_key_env)
            if value is None:
                raise EndpointError(
                    f"endpoint {self.label} reads its API key from ${self.api_key_env}, which "
                    "is not set; export it, or remove api_key_env from config.toml"
                )
            return value
        return "" if self.name else os.environ.get(KEY_ENV, "")

    def key_hint(self) -> str:
        """Where this endpoint's key comes from, as advice after a refused one."""
        if self.api_key:
            return f"fix api_key in config.toml's [endpoints.{self.name}]"
        if self.api_key_env:
            return f"put the right one in ${self.api_key_env}"
        if self.name:
            return f"set api_key_env in config.toml's [endpoints.{self.name}]"
        return f"put the right one in ${KEY_ENV}, or declare the server in config.toml"


@dataclass(frozen=True)
class RemoteSource:
    """A parsed `openai:` source: the server and the model asked for (None: the server's)."""

    endpoint: Endpoint
    model: str | None

    @property
    def text(self) -> str:
        """The source as --model takes it."""
        target = self.endpoint.name or self.endpoint.url
        return REMOTE_PREFIX + target + (f"#{self.model}" if self.model else "")


def _check_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise EndpointError(
            f"{where}: {url!r} is not an http(s) URL; give the server's API root, such as "
            "http://host:8000/v1"
        )
    if "@" in parts.netloc:  # it would show in the status bar, errors and the saved setting
        raise EndpointError(
            f"{where}: a URL with credentials in it; put the key in the endpoint's api_key_env"
        )
    return url.rstrip("/")


def parse_source(source: str, endpoints: Mapping[str, Endpoint]) -> RemoteSource:
    """`openai:URL[#MODEL]` or `openai:NAME[#MODEL]` (NAME from config.toml's [endpoints]).
    A URL that an endpoint declares gets that endpoint's key and settings."""
    target, _, model = source.removeprefix(REMOTE_PREFIX).partition("#")
    target = target.strip()
    if target in endpoints:
        return RemoteSource(endpoints[target], model.strip() or None)
    if "://" not in target:
        known = ", ".join(sorted(endpoints)) or "none in config.toml"
        raise EndpointError(
            f"{source}: {target or 'nothing'} is neither a URL (openai:http://host:8000/v1) "
            f"nor a configured endpoint ({known})"
        )
    url = _check_url(target, source)
    declared = next((e for e in endpoints.values() if e.url == url), None)
    return RemoteSource(declared or Endpoint(url), model.strip() or None)


def endpoints_from_toml(data: object) -> dict[str, Endpoint]:
    """config.toml's [endpoints.NAME] tables: url, and optionally api_key_env (or api_key),
    timeout (seconds) and context (tokens). One-line EndpointError for a bad entry."""
    if not isinstance(data, dict):
        raise EndpointError("config: [endpoints] must hold tables such as [endpoints.team]")
    out: dict[str, Endpoint] = {}
    for name, table in data.items():
        where = f"config: [endpoints.{name}]"
        if not isinstance(table, dict):
            raise EndpointError(f"{where} must be a table with a url")
        unknown = set(table) - {"url", "api_key", "api_key_env", "timeout", "context"}
        if unknown:
            raise EndpointError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
        url = table.get("url")
        if not isinstance(url, str):
            raise EndpointError(f'{where} needs url = "http://host:8000/v1"')
        for key in ("api_key", "api_key_env"):
            if not isinstance(table.get(key, ""), str):
                raise EndpointError(f"{where}: {key} must be a string")
        timeout, context = table.get("timeout", TIMEOUT_S), table.get("context", CONTEXT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise EndpointError(f"{where}: timeout must be a number of seconds above 0")
        if isinstance(context, bool) or not isinstance(context, int) or context < 256:
            raise EndpointError(f"{where}: context must be a number of tokens, at least 256")
        out[name] = Endpoint(
            _check_url(url, where),
            name=name,
            api_key=table.get("api_key", ""),
            api_key_env=table.get("api_key_env", ""),
            timeout_s=float(timeout),
            context=context,
        )
    return out
