"""The user's config file (config.toml): theme, keymap, model, engine, decoding and sampling
settings.

Kept free of textual and torch so the CLI and tests can read it cheaply.
"""

from __future__ import annotations

import contextlib
import copy
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from samchat import paths
from samchat.corpus.rule import RetrievalRule
from samchat.decoding.knobs import KnobValue
from samchat.decoding.params import DecodingConfig, SamplingParams, from_mapping, to_mapping
from samchat.engines.registry import ENGINES
from samchat.errors import SamchatError
from samchat.models.device import DTYPES
from samchat.models.loader import ModelSpec
from samchat.remote.endpoint import Endpoint, endpoints_from_toml

if TYPE_CHECKING:
    from tomlkit import TOMLDocument

CONFIG_NAME = "config.toml"
DEFAULT_THEME = "samchat-dark"
# The [decoding] and [sampling] tables hold DecodingConfig's and SamplingParams' knobs
# (samchat/decoding/params.py declares their defaults, types and ranges). TOML has no null:
# a knob whose value is None (seed: random) is left out of the file.


class ConfigError(SamchatError):
    """The config file cannot be read or holds a bad value."""


class ConfigTables(TypedDict):
    """config.toml's settings as TOML holds them (Config.to_toml_dict), [endpoints] aside."""

    theme: str
    model: str
    device: str
    engine: str
    dtype: str
    keymap: dict[str, str]
    decoding: dict[str, KnobValue]
    sampling: dict[str, KnobValue]
    documents: dict[str, float]  # RetrievalRule.SECTION


def config_path() -> Path:
    return paths.config_dir() / CONFIG_NAME


@dataclass
class Config:
    theme: str = DEFAULT_THEME
    keymap: dict[str, str] = field(default_factory=dict)
    model: str = ""  # "" = the default offline model
    device: str = "auto"
    engine: str = "auto"  # one of samchat.engines.ENGINES
    # The engine's format, as --dtype: with no dtype an engine means what `--engine` alone means
    # on the command line (torch: float32 on a CPU), so the two are read and written together.
    dtype: str = "auto"
    # [decoding] and [sampling], checked (parse_decoding / parse_sampling); dicts only in TOML.
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    documents: RetrievalRule = field(default_factory=RetrievalRule)  # [documents]: retrieval
    # [endpoints.NAME]: OpenAI-compatible servers `openai:NAME` reaches. The user writes them;
    # saving the settings leaves them as they are (to_toml_dict does not hold them).
    endpoints: dict[str, Endpoint] = field(default_factory=dict)

    def model_spec(self) -> ModelSpec:
        """The model, device and engine this file names (the command line's options override
        them: cli_options.spec_from_args)."""
        return ModelSpec(
            source=self.model or None, device=self.device, engine=self.engine, dtype=self.dtype
        )

    def to_toml_dict(self) -> ConfigTables:
        return {
            "theme": self.theme,
            "model": self.model,
            "device": self.device,
            "engine": self.engine,
            "dtype": self.dtype,
            "keymap": dict(self.keymap),
            "decoding": {k: v for k, v in to_mapping(self.decoding).items() if v is not None},
            "sampling": {k: v for k, v in to_mapping(self.sampling).items() if v is not None},
            "documents": self.documents.to_mapping(),
        }


def parse_decoding(values: Mapping[str, object]) -> DecodingConfig:
    """[decoding]: defaults filled in, types and ranges checked (params.py's rules); raises
    ConfigError with one line."""
    try:
        return from_mapping(DecodingConfig, values, where="config")
    except SamchatError as exc:
        raise ConfigError(str(exc)) from None


def parse_sampling(values: Mapping[str, object]) -> SamplingParams:
    """[sampling], as parse_decoding. A negative seed (the old `seed = -1` of config files
    written before seeds could be unset) means random, as it did."""
    values = dict(values)
    seed = values.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool) and seed < 0:
        values["seed"] = None
    try:
        return from_mapping(SamplingParams, values, where="config")
    except SamchatError as exc:
        raise ConfigError(str(exc)) from None


def _table(data: Mapping[str, object], name: str) -> dict[str, object]:
    section = data.get(name, {})
    if not isinstance(section, dict):
        raise ConfigError(f"config: [{name}] must be a table")
    return section


def from_toml_dict(data: Mapping[str, object]) -> Config:
    cfg = Config()
    for key in ("theme", "model", "device", "engine", "dtype"):
        if key in data:
            if not isinstance(data[key], str):
                raise ConfigError(f"config: {key} must be a string")
            setattr(cfg, key, data[key])
    if cfg.engine not in ENGINES:
        raise ConfigError(f"config: engine must be one of {', '.join(ENGINES)}, not {cfg.engine!r}")
    if cfg.dtype not in DTYPES:
        raise ConfigError(f"config: dtype must be one of {', '.join(DTYPES)}, not {cfg.dtype!r}")
    keymap = data.get("keymap", {})
    if not isinstance(keymap, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in keymap.items()
    ):
        raise ConfigError("config: [keymap] must map binding ids to key strings")
    cfg.keymap = dict(keymap)
    cfg.decoding = parse_decoding(_table(data, DecodingConfig.SECTION))
    cfg.sampling = parse_sampling(_table(data, SamplingParams.SECTION))
    try:
        cfg.documents = RetrievalRule.from_mapping(data.get(RetrievalRule.SECTION, {}))
        cfg.endpoints = endpoints_from_toml(data.get("endpoints", {}))
    except SamchatError as exc:
        raise ConfigError(str(exc)) from None
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


def _plain(value: object) -> object:
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class Changes:
    """What the user changed since the file was read: top-level values set, and per table the
    keys set and the keys removed (a knob unset, a key binding dropped)."""

    values: dict[str, object]
    tables: dict[str, tuple[dict[str, object], tuple[str, ...]]]

    def __bool__(self) -> bool:
        return bool(self.values or self.tables)


def changes(cfg: Config, since: Config) -> Changes:
    """The settings of `cfg` that differ from `since` (the config as read): only these are
    written, so a default or a resolved choice never lands in the user's file."""
    now, before = cfg.to_toml_dict(), since.to_toml_dict()
    values: dict[str, object] = {}
    tables: dict[str, tuple[dict[str, object], tuple[str, ...]]] = {}
    for key, value in now.items():
        old = before.get(key)
        if not isinstance(value, dict):
            if value != old:
                values[key] = _plain(value)
            continue
        old_table = old if isinstance(old, dict) else {}
        setting = {k: _plain(v) for k, v in value.items() if old_table.get(k) != v}
        removed = tuple(k for k in old_table if k not in value)
        if setting or removed:
            tables[key] = (setting, removed)
    return Changes(values, tables)


def _save_document(path: Path, change: Changes) -> TOMLDocument:
    """The file's tomlkit document (comments, order, unknown keys kept) with `change` applied."""
    import tomlkit

    try:
        document = tomlkit.parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        document = tomlkit.document()
    except (OSError, UnicodeDecodeError, tomlkit.exceptions.ParseError):
        # Unreadable as TOML: keep the user's text next to it rather than overwrite it.
        with contextlib.suppress(OSError):
            path.replace(path.with_name(path.name + ".invalid"))
        document = tomlkit.document()
    for key, value in change.values.items():
        document[key] = value
    for key, (setting, removed) in change.tables.items():
        table = document.get(key)
        if not isinstance(table, dict):
            if not setting:
                continue  # nothing to remove from a table the file does not have
            table = tomlkit.table()
            document[key] = table
        for name in removed:
            if name in table:
                del table[name]
        for name, value in setting.items():
            table[name] = value
    return document


def save_config(cfg: Config, since: Config, path: Path | None = None) -> Path:
    """Write what the user changed since `since` (the config as read or last saved) and nothing
    else; no change leaves the file as it is (or absent). Atomic, so a crash mid-write never
    leaves a half file; the user's comments, layout and keys samchat does not know are kept."""
    import tomlkit

    path = path or config_path()
    change = changes(cfg, since)
    if not change:
        return path
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_suffix(".toml.tmp")
    try:
        document = _save_document(path, change)
        tmp.write_text(tomlkit.dumps(document), encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise ConfigError(f"cannot write config file {path}: {exc}") from exc
    return path


class UserSettings:
    """config.toml as a front end holds it while it runs: the settings in use, and the file's
    as read (then as last saved), so that a save writes only what the user changed."""

    def __init__(self, path: Path | None = None, config: Config | None = None) -> None:
        """config: settings given instead of the file's (tests); path: the file (None: the
        config directory's)."""
        self.path = path
        self.problem: str | None = None  # the file did not load: it is never written over
        if config is None:
            try:
                config = load_config(path)
            except ConfigError as exc:
                self.problem = str(exc)
                config = Config()
        self.cfg = config
        self._saved = copy.deepcopy(config)

    def save(self) -> None:
        """Writes what changed since the last save (ConfigError: it could not; a file that did
        not load is left for the user to fix, since writing would put defaults over it)."""
        if self.problem:
            raise ConfigError(f"{self.problem}: not saving settings over it")
        save_config(self.cfg, self._saved, self.path)
        self._saved = copy.deepcopy(self.cfg)
