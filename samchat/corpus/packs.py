"""Bundled corpus packs: `corpora/<name>/manifest.toml` plus the text files it lists."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from samchat.errors import SamchatError

MANIFEST = "manifest.toml"


@dataclass(frozen=True)
class CorpusPack:
    name: str
    title: str
    description: str
    license: str
    files: tuple[Path, ...]


def corpora_dir() -> Path:
    """Where the packs live: SAMCHAT_CORPORA_DIR, else samchat/corpora/ (package data)."""
    env = os.environ.get("SAMCHAT_CORPORA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[1] / "corpora"


def _load(directory: Path) -> CorpusPack:
    path = directory / MANIFEST
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SamchatError(f"corpus manifest {path} is unreadable: {exc}") from None
    files = data.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise SamchatError(f'corpus manifest {path} needs `files = ["..."]`')
    paths = tuple(directory / f for f in files)
    for p in paths:
        if not p.is_file():
            raise SamchatError(f"corpus {directory.name} lists {p.name}, which is missing")
    return CorpusPack(
        name=str(data.get("name") or directory.name),
        title=str(data.get("title") or directory.name),
        description=str(data.get("description") or ""),
        license=str(data.get("license") or "unknown"),
        files=paths,
    )


def packs(root: Path | None = None) -> list[CorpusPack]:
    root = root or corpora_dir()
    if not root.is_dir():
        return []
    return [_load(d) for d in sorted(root.iterdir()) if (d / MANIFEST).is_file()]


def pack(name: str, root: Path | None = None) -> CorpusPack:
    for p in packs(root):
        if p.name == name:
            return p
    known = ", ".join(p.name for p in packs(root)) or "none"
    raise SamchatError(f"there is no corpus pack {name!r} (available: {known})")
