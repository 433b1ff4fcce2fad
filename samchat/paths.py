"""Where samchat keeps its files. Environment variables override the platform defaults."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from platformdirs import user_cache_dir, user_config_dir, user_data_dir

APP = "samchat"


def _dir(env: str, default: str) -> Path:
    value = os.environ.get(env)
    path = Path(value).expanduser() if value else Path(default)
    private_dir(path, tighten=not value)
    return path


def private_dir(path: Path, *, tighten: bool = False) -> None:
    """Create `path` readable by its owner only (0700, whatever the umask): it holds chats,
    documents and their tokens. An existing directory keeps its mode (one the user chose may be
    shared on purpose) unless `tighten`: a default directory an older samchat created 0755."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        if not path.is_dir():
            raise
        if tighten and path.stat().st_mode & 0o077:
            with contextlib.suppress(OSError):  # someone else's directory: keep working
                os.chmod(path, 0o700)
        return
    os.chmod(path, 0o700)  # mkdir's mode is masked by the umask


def data_dir() -> Path:
    """Chats, documents and the static index (SAMCHAT_DATA_DIR overrides)."""
    return _dir("SAMCHAT_DATA_DIR", user_data_dir(APP))


def cache_dir() -> Path:
    """Converted models, cost curves, Token Recycling tables (SAMCHAT_CACHE_DIR overrides)."""
    return _dir("SAMCHAT_CACHE_DIR", user_cache_dir(APP))


def config_dir() -> Path:
    """config.toml: theme, keymap, decoding settings (SAMCHAT_CONFIG_DIR overrides)."""
    return _dir("SAMCHAT_CONFIG_DIR", user_config_dir(APP))


def model_cache_dir() -> Path:
    """Models converted from GGUF (SAMCHAT_MODEL_CACHE overrides; shared across test runs)."""
    return _dir("SAMCHAT_MODEL_CACHE", str(cache_dir() / "models"))
