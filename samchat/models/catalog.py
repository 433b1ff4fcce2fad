"""The models this machine already has: the Hugging Face cache, Ollama's store, LM Studio's
folders, GGUF files loaded before, and the bundled default.

`list_models()` is what `samchat models` prints and the TUI's model picker offers; each entry's
`source` is what `--model` (or ModelSpec.source) takes. Nothing here imports torch,
transformers or a UI: listing reads directories, small JSON manifests and 4-byte headers only.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from samchat.errors import ModelLoadError

GGUF_MAGIC = b"GGUF"
OLLAMA_PREFIX = "ollama:"
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
# GGUF files loaded before: a small JSON file in the data dir (path -> last use).
RECENT_NAME = "models.json"
RECENT_MAX = 50
# Hugging Face architectures that generate text token by token.
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


@dataclass(frozen=True)
class ModelEntry:
    """One model the user can load. source: what --model takes ("" = the bundled default)."""

    source: str
    name: str
    origin: str  # default | huggingface | ollama | lmstudio | recent | endpoint NAME
    format: str  # gguf | hf | remote
    path: str  # the file or directory on disk (a remote one: its server's URL)
    size: int | None = None  # bytes on disk, when known

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_gguf(path: Path) -> bool:
    """A GGUF file, by its magic bytes (an Ollama blob has no .gguf suffix)."""
    try:
        with path.open("rb") as f:
            return f.read(4) == GGUF_MAGIC
    except OSError:
        return False


# --- Ollama -------------------------------------------------------------------------------


def ollama_dirs() -> list[Path]:
    """Where Ollama keeps models: $OLLAMA_MODELS, else ~/.ollama/models (and the Linux
    service's /usr/share/ollama/.ollama/models)."""
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [Path("~/.ollama/models").expanduser(), Path("/usr/share/ollama/.ollama/models")]


def _ollama_parts(name: str) -> tuple[str, str, str, str]:
    """'llama3.2', 'llama3.2:1b', 'me/model:tag', 'host/ns/model:tag' -> (host, ns, model, tag)."""
    last = name.rsplit("/", 1)[-1]
    tag = "latest"
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    parts = name.split("/")
    if len(parts) == 1:
        return OLLAMA_REGISTRY, "library", parts[0], tag
    if len(parts) == 2:
        return OLLAMA_REGISTRY, parts[0], parts[1], tag
    return parts[0], "/".join(parts[1:-1]), parts[-1], tag


def _ollama_display(host: str, namespace: str, model: str, tag: str) -> str:
    if host == OLLAMA_REGISTRY:
        name = model if namespace == "library" else f"{namespace}/{model}"
    else:
        name = f"{host}/{namespace}/{model}"
    return f"{name}:{tag}"


def _ollama_blob(root: Path, manifest: Path) -> tuple[Path, int | None] | None:
    """The model layer's blob named by a manifest, or None when it has none or it is missing."""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        layers = data["layers"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for layer in layers if isinstance(layers, list) else []:
        if not isinstance(layer, dict) or layer.get("mediaType") != OLLAMA_MODEL_LAYER:
            continue
        digest = str(layer.get("digest", ""))
        blob = root / "blobs" / digest.replace(":", "-")
        if digest and blob.is_file():
            size = layer.get("size")
            return blob, size if isinstance(size, int) else None
    return None


def resolve_ollama(source: str) -> Path:
    """`ollama:NAME[:TAG]` -> the GGUF blob of that model in Ollama's store."""
    name = source.removeprefix(OLLAMA_PREFIX).strip()
    if not name:
        raise ModelLoadError("--model ollama: needs a model name, e.g. ollama:llama3.2:1b")
    host, namespace, model, tag = _ollama_parts(name)
    looked = []
    for root in ollama_dirs():
        manifest = root / "manifests" / host / namespace / model / tag
        looked.append(str(root))
        if not manifest.is_file():
            continue
        found = _ollama_blob(root, manifest)
        if found is None:
            raise ModelLoadError(
                f"Ollama's manifest for {name} names no model file that exists under "
                f"{root / 'blobs'}; run `ollama pull {name}` again"
            )
        return found[0]
    raise ModelLoadError(
        f"Ollama model {name} not found (looked in {', '.join(looked)}); run `ollama pull "
        f"{name}`, set OLLAMA_MODELS, or see `samchat models`"
    )


def _ollama_models() -> Iterator[ModelEntry]:
    for root in ollama_dirs():
        manifests = root / "manifests"
        if not manifests.is_dir():
            continue
        for manifest in sorted(manifests.glob("*/*/*/*")):
            if not manifest.is_file():
                continue
            host, namespace, model, tag = manifest.relative_to(manifests).parts
            found = _ollama_blob(root, manifest)
            if found is None or not is_gguf(found[0]):
                continue
            display = _ollama_display(host, namespace, model, tag)
            yield ModelEntry(
                source=OLLAMA_PREFIX + display.removesuffix(":latest"),
                name=display,
                origin="ollama",
                format="gguf",
                path=str(found[0]),
                size=found[1] if found[1] is not None else _size(found[0]),
            )


# --- LM Studio ----------------------------------------------------------------------------


def lmstudio_dirs() -> list[Path]:
    return [Path("~/.lmstudio/models").expanduser(), Path("~/.cache/lm-studio/models").expanduser()]


def _lmstudio_models() -> Iterator[ModelEntry]:
    for root in lmstudio_dirs():
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*.gguf")):
            # mmproj-*.gguf: a vision projector that goes with a model, not a model itself
            if path.name.lower().startswith("mmproj") or not is_gguf(path):
                continue
            yield ModelEntry(
                source=str(path),
                name=path.relative_to(root).with_suffix("").as_posix(),
                origin="lmstudio",
                format="gguf",
                path=str(path),
                size=_size(path),
            )


# --- Hugging Face cache -------------------------------------------------------------------


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it (read now, not at import)."""
    for env in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        value = os.environ.get(env)
        if value:
            return Path(value).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        home = os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def _is_causal_lm(config: Path) -> bool:
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    architectures = data.get("architectures") if isinstance(data, dict) else None
    return isinstance(architectures, list) and any(
        isinstance(a, str) and a.endswith(_CAUSAL_SUFFIXES) for a in architectures
    )


def cached_snapshot(repo_id: str) -> Path | None:
    """The local snapshot directory of a hub model in the HF cache (main, else the newest one
    with a config.json), or None when it is not cached."""
    repo = hf_hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    with contextlib.suppress(OSError):
        main = snapshots / (repo / "refs" / "main").read_text().strip()
        if (main / "config.json").is_file():
            return main
    candidates = [s for s in snapshots.iterdir() if (s / "config.json").is_file()]
    return max(candidates, key=lambda s: s.stat().st_mtime) if candidates else None


def _hf_models() -> Iterator[ModelEntry]:
    root = hf_hub_cache()
    if not root.is_dir():
        return
    from huggingface_hub import scan_cache_dir

    try:
        info = scan_cache_dir(root)
    except Exception:  # a cache huggingface_hub cannot read: nothing to offer from it
        return
    for repo in sorted(info.repos, key=lambda r: r.repo_id.lower()):
        if repo.repo_type != "model" or not repo.revisions:
            continue
        snapshot = cached_snapshot(repo.repo_id)
        if snapshot is not None and _is_causal_lm(snapshot / "config.json"):
            yield ModelEntry(
                source=repo.repo_id,
                name=repo.repo_id,
                origin="huggingface",
                format="hf",
                path=str(snapshot),
                size=repo.size_on_disk,
            )
            continue
        newest = max(repo.revisions, key=lambda r: r.last_modified)
        for file in sorted(newest.files, key=lambda f: f.file_name):
            name = file.file_name
            if not name.lower().endswith(".gguf") or name.lower().startswith("mmproj"):
                continue
            if is_gguf(file.file_path):
                yield ModelEntry(
                    source=str(file.file_path),
                    name=f"{repo.repo_id}/{name}",
                    origin="huggingface",
                    format="gguf",
                    path=str(file.file_path),
                    size=file.size_on_disk,
                )


# --- GGUF files loaded before -------------------------------------------------------------


def recent_file(data_dir: Path) -> Path:
    """Where the GGUF files loaded before are listed: next to the chats (the caller resolves
    the data directory once, --data-dir included)."""
    return data_dir / RECENT_NAME


def _read_recent(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        entries = data["gguf"]
        return {str(k): float(v) for k, v in entries.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def remember_gguf(path: Path, target: Path) -> None:
    """Note that a GGUF file was loaded, so `samchat models` offers it again. Best effort: a
    data dir that cannot be written never stops a model from loading."""
    from filelock import FileLock

    try:
        with FileLock(target.with_suffix(".lock")):
            entries = _read_recent(target)
            entries[str(path.resolve())] = time.time()
            kept = sorted(entries.items(), key=lambda kv: kv[1], reverse=True)[:RECENT_MAX]
            tmp = target.with_suffix(".json.tmp")
            tmp.write_text(json.dumps({"version": 1, "gguf": dict(kept)}, indent=1) + "\n")
            tmp.replace(target)
    except OSError:
        pass


def _recent_models(recent: Path) -> Iterator[ModelEntry]:
    entries = _read_recent(recent)
    for path_text, _ in sorted(entries.items(), key=lambda kv: kv[1], reverse=True):
        path = Path(path_text)
        if is_gguf(path):
            yield ModelEntry(
                source=path_text,
                name=path.name,
                origin="recent",
                format="gguf",
                path=path_text,
                size=_size(path),
            )


# --- everything ---------------------------------------------------------------------------


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _default() -> ModelEntry:
    from samchat.models.default import DEFAULT_MODEL_NAME, bundled_gguf

    try:
        path = str(bundled_gguf())
    except ModelLoadError:
        path = ""
    return ModelEntry(
        source="",
        name=f"{DEFAULT_MODEL_NAME} (default, bundled)",
        origin="default",
        format="gguf",
        path=path,
        size=_size(Path(path)) if path else None,
    )


def list_models(recent: Path | None = None) -> list[ModelEntry]:
    """Every model found locally, the default first; a file found twice is listed once (the
    first place wins: Hugging Face, Ollama, LM Studio, then the files loaded before that
    `recent` lists, see `recent_file`)."""
    entries = [_default()]
    seen = {entries[0].path} if entries[0].path else set()
    sources = [_hf_models(), _ollama_models(), _lmstudio_models()]
    if recent is not None:
        sources.append(_recent_models(recent))
    for found in sources:
        for entry in found:
            key = str(Path(entry.path).resolve()) if entry.format == "gguf" else entry.path
            if key in seen or entry.path in seen:
                continue
            seen.add(key)
            entries.append(entry)
    return entries
