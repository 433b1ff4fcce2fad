"""The user's config file (config.toml): theme, keymap, model, decoding and sampling settings.

Kept free of textual and torch so the CLI and tests can read it cheaply.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samchat import paths
from samchat.errors import SamchatError

CONFIG_NAME = "config.toml"
METHODS = ("plain", "sam", "tr", "sam+tr")
DEFAULT_THEME = "samchat-dark"

# Defaults mirror samchat.decoding.DecodingConfig / SamplingParams; only these keys are written.
DECODING_DEFAULTS: dict[str, Any] = {
    "method": "sam+tr",
    "l_threshold": 5,
    "l_bias": 5,
    "max_draft": 0,
    "alpha": 4,
    "static_tree_topk": 0,
}
SAMPLING_DEFAULTS: dict[str, Any] = {
    "max_new_tokens": 512,
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": 0,
    "seed": -1,  # -1 = no fixed seed (TOML has no null)
}


class ConfigError(SamchatError):
    """The config file cannot be read or holds a bad value."""


def config_path() -> Path:
    return paths.config_dir() / CONFIG_NAME


@dataclass
class Config:
    theme: str = DEFAULT_THEME
    keymap: dict[str, str] = field(default_factory=dict)
    model: str = ""  # "" = the default offline model
    device: str = "auto"
    decoding: dict[str, Any] = field(default_factory=lambda: dict(DECODING_DEFAULTS))
    sampling: dict[str, Any] = field(default_factory=lambda: dict(SAMPLING_DEFAULTS))

    def to_toml_dict(self) -> dict[str, Any]:
        return {
            "theme": self.theme,
            "model": self.model,
            "device": self.device,
            "keymap": dict(self.keymap),
            "decoding": dict(self.decoding),
            "sampling": dict(self.sampling),
        }


def _check_number(section: str, key: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool) or isinstance(value, bool):
        raise ConfigError(f"config: {section}.{key} must be a number, got {value!r}")
    if isinstance(default, int):
        if not isinstance(value, int):
            raise ConfigError(f"config: {section}.{key} must be an integer, got {value!r}")
        return value
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"config: {section}.{key} must be a number, got {value!r}")
    return float(value)


def validate_decoding(values: dict[str, Any]) -> dict[str, Any]:
    """Defaults filled in, types and ranges checked; raises ConfigError with one line."""
    out = dict(DECODING_DEFAULTS)
    for key, value in values.items():
        if key not in DECODING_DEFAULTS:
            raise ConfigError(f"config: unknown decoding setting {key!r}")
        if key == "method":
            if value not in METHODS:
                raise ConfigError(f"config: decoding.method must be one of {', '.join(METHODS)}")
            out[key] = value
        else:
            out[key] = _check_number("decoding", key, value, DECODING_DEFAULTS[key])
            if out[key] < (1 if key == "alpha" else 0):
                raise ConfigError(f"config: decoding.{key} must be >= {1 if key == 'alpha' else 0}")
    return out


def validate_sampling(values: dict[str, Any]) -> dict[str, Any]:
    out = dict(SAMPLING_DEFAULTS)
    for key, value in values.items():
        if key not in SAMPLING_DEFAULTS:
            raise ConfigError(f"config: unknown sampling setting {key!r}")
        out[key] = _check_number("sampling", key, value, SAMPLING_DEFAULTS[key])
    if out["max_new_tokens"] < 1:
        raise ConfigError("config: sampling.max_new_tokens must be >= 1")
    if out["temperature"] < 0:
        raise ConfigError("config: sampling.temperature must be >= 0")
    if not 0 < out["top_p"] <= 1:
        raise ConfigError("config: sampling.top_p must be in (0, 1]")
    if out["top_k"] < 0:
        raise ConfigError("config: sampling.top_k must be >= 0")
    return out


def from_toml_dict(data: dict[str, Any]) -> Config:
    cfg = Config()
    for key in ("theme", "model", "device"):
        if key in data:
            if not isinstance(data[key], str):
                raise ConfigError(f"config: {key} must be a string")
            setattr(cfg, key, data[key])
    keymap = data.get("keymap", {})
    if not isinstance(keymap, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in keymap.items()
    ):
        raise ConfigError("config: [keymap] must map binding ids to key strings")
    cfg.keymap = dict(keymap)
    for name, check in (("decoding", validate_decoding), ("sampling", validate_sampling)):
        section = data.get(name, {})
        if not isinstance(section, dict):
            raise ConfigError(f"config: [{name}] must be a table")
        setattr(cfg, name, check(section))
    return cfg


def load_config(path: Path | None = None) -> Config:
    """Read config.toml; a missing file gives the defaults, a bad one raises ConfigError."""
    path = path or config_path()
    if not path.exists():
        return Config()
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    return from_toml_dict(data)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # JSON string escapes are a subset of TOML basic-string escapes.
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _toml_key(key: str) -> str:
    bare = key.replace("_", "").replace("-", "").isalnum() and key.isascii()
    return key if bare else json.dumps(key)


def dumps_toml(data: dict[str, Any]) -> str:
    """TOML for our flat layout: top-level scalars, then one level of tables of scalars."""
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict)}
    lines = [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in scalars.items()]
    for name, table in data.items():
        if isinstance(table, dict):
            lines.append("")
            lines.append(f"[{_toml_key(name)}]")
            lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in table.items())
    return "\n".join(lines) + "\n"


def save_config(cfg: Config, path: Path | None = None) -> Path:
    """Write atomically so a crash mid-write never leaves a half file."""
    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    try:
        tmp.write_text(dumps_toml(cfg.to_toml_dict()), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write config file {path}: {exc}") from exc
    return path
