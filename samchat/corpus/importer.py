"""`samchat import`: walk paths, read files, store each document or chat in one transaction."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samchat.corpus.chatgpt import EXPORT_NAME, ExportedChat, read_export
from samchat.corpus.readers import DEFAULT_MAX_BYTES, Skip, read_file
from samchat.errors import ImportFailed
from samchat.store import Store, content_hash

Encode = Callable[[str], list[int]]
# (files done, files total, current path)
Progress = Callable[[int, int, Path], None]
# Called after a document is committed, with its tokens (if an encoder was given).
OnDocument = Callable[[int, list[int] | None], None]


@dataclass
class ImportSummary:
    documents: list[tuple[Path, int]] = field(default_factory=list)  # (path, document id)
    chats: int = 0
    messages: int = 0
    duplicates: list[Path] = field(default_factory=list)
    replaced: list[int] = field(default_factory=list)  # ids of older versions of re-imported files
    skipped: list[tuple[Path, str]] = field(default_factory=list)  # (path, reason)
    tokens: int = 0
    chars: int = 0
    seconds: float = 0.0

    @property
    def imported_anything(self) -> bool:
        return bool(self.documents or self.chats)

    def describe(self, rates: bool = False) -> str:
        """One line for the user (the CLI and the TUI alike); rates adds tokens and speeds."""
        docs = len(self.documents)
        line = f"imported {docs} document{'s' * (docs != 1)}"
        if rates and self.tokens:
            line += f" ({self.tokens:,} tokens)"
        if self.chats:
            line += f" and {self.chats} chats ({self.messages} messages)"
        line += f" in {self.seconds:.2f}s"
        secs = max(self.seconds, 1e-9)
        if rates and docs:
            line += f": {docs / secs:.1f} docs/s"
            if self.tokens:
                line += f", {self.tokens / secs:,.0f} tokens/s"
        extras = []
        if self.duplicates:
            extras.append(f"{len(self.duplicates)} already imported")
        if self.replaced:
            extras.append(f"{len(self.replaced)} older versions replaced")
        if self.skipped:
            extras.append(f"{len(self.skipped)} skipped")
        return line + (f" ({', '.join(extras)})" if extras else "")


Chain = list[tuple[Path, Any]]  # (directory, its .gitignore as a pathspec.GitIgnoreSpec)


def _gitignore(directory: Path) -> Any:
    """The directory's .gitignore as a GitIgnoreSpec, or None (none there, or unreadable)."""
    path = directory / ".gitignore"
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    from pathspec import GitIgnoreSpec

    return GitIgnoreSpec.from_lines(lines)


def _ignored(path: Path, chain: Chain, is_dir: bool) -> bool:
    """Git's rule: the .gitignore nearest to the path that has a matching pattern decides (its
    last matching pattern, so `!keep.log` re-includes)."""
    for base, spec in chain:  # nearest first
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        decision = None
        for pattern in spec.patterns:  # (PathSpec.check_file does this from pathspec 0.12 on)
            if pattern.include is not None and pattern.match_file(rel) is not None:
                decision = bool(pattern.include)
        if decision is not None:
            return decision
    return False


def _outer_chain(root: Path) -> Chain:
    """The .gitignore files above `root` up to its repository's top (a folder holding .git),
    nearest first; none when `root` is not inside a repository."""
    chain: Chain = []
    if (root / ".git").exists():  # root is a repository's top: nothing above it counts
        return chain
    for parent in root.resolve().parents:
        spec = _gitignore(parent)
        if spec is not None:
            chain.append((parent, spec))
        if (parent / ".git").exists():
            return chain
    return []


def _walk(root: Path) -> Iterator[Path]:
    """Files under root in a stable order: hidden ones (.git/ too) left out, .gitignore files
    honoured (nested ones, and those above root within its repository)."""
    top = root.resolve()
    chains: dict[Path, Chain] = {top.parent: _outer_chain(root)}
    for current, dirs, files in os.walk(root):
        here = Path(current)
        absolute = top / here.relative_to(root)  # gitignore patterns are relative to a base
        spec = _gitignore(absolute)
        chain = ([(absolute, spec)] if spec is not None else []) + chains.get(absolute.parent, [])
        chains[absolute] = chain

        def keep(name: str, is_dir: bool, absolute: Path = absolute, chain: Chain = chain) -> bool:
            return not name.startswith(".") and not _ignored(absolute / name, chain, is_dir)

        dirs[:] = sorted(d for d in dirs if keep(d, True))
        yield from (here / f for f in sorted(files) if keep(f, False))


def collect_files(paths: Iterable[Path]) -> list[Path]:
    """All files under `paths`, recursively, in a stable order. Hidden files and directories met
    while walking are left out, and so is what a .gitignore excludes; a path named explicitly
    is always taken. A missing path is an error before anything is imported."""
    paths = list(paths)
    for path in paths:
        if not path.exists():
            raise ImportFailed(f"no such file or directory: {path}")
    out: list[Path] = []
    for path in paths:
        if not path.is_dir():
            out.append(path)
            continue
        out.extend(_walk(path))
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def _store_chat(store: Store, chat: ExportedChat) -> int:
    """One transaction per chat: it is there completely or not at all."""
    with store.transaction():
        chat_id = store.create_chat(
            chat.title,
            model=next((m.model for m in chat.messages if m.model), None),
            source=f"chatgpt:{chat.source_id}",
            created_at=chat.created_at,
        )
        ids: dict[str, int] = {}
        for m in chat.messages:
            ids[m.key] = store.add_message(
                chat_id,
                m.role,
                m.content,
                ids.get(m.parent_key) if m.parent_key else None,
                model=m.model,
                created_at=m.created_at,
            )
        if chat.updated_at is not None:
            store.conn.execute(
                "UPDATE chats SET updated_at = ? WHERE id = ?", (chat.updated_at, chat_id)
            )
    return len(chat.messages)


def _import_export(store: Store, path: Path, summary: ImportSummary) -> None:
    chats = read_export(path)
    fresh = 0
    for chat in chats:
        if store.chat_by_source(f"chatgpt:{chat.source_id}") is not None:
            continue
        summary.messages += _store_chat(store, chat)
        summary.chats += 1
        fresh += 1
    if chats and not fresh:
        summary.duplicates.append(path)


def import_paths(
    store: Store,
    paths: Sequence[Path],
    *,
    encode: Encode | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    corpus: str | None = None,
    progress: Progress | None = None,
    on_document: OnDocument | None = None,
) -> ImportSummary:
    """Import files and ChatGPT exports under `paths`. Per-file problems become skips with a
    reason; only a missing path fails the whole import."""
    start = time.perf_counter()
    files = collect_files(paths)
    summary = ImportSummary()
    for done, path in enumerate(files):
        if progress is not None:
            progress(done, len(files), path)
        try:
            if path.name.lower() == EXPORT_NAME:
                _import_export(store, path, summary)
                continue
            doc = read_file(path, max_bytes)
        except Skip as why:
            summary.skipped.append((path, str(why)))
            continue
        digest = content_hash(doc.text)
        if store.has_document_hash(digest):
            summary.duplicates.append(path)
            continue
        tokens = encode(doc.text) if encode is not None else None
        source = str(path.resolve())
        # A changed file replaces what was imported from the same path (and its passages), so
        # retrieval never quotes the old version.
        with store.transaction():
            older = store.documents_at(source)
            doc_id = store.add_document(
                source,
                doc.title,
                doc.text,
                doc.kind,
                token_count=None if tokens is None else len(tokens),
                corpus=corpus,
                digest=digest,
            )
            if doc_id is not None:
                for old in older:
                    store.delete_document(old)
        if doc_id is None:  # another process stored the same text meanwhile
            summary.duplicates.append(path)
            continue
        summary.replaced += older
        summary.documents.append((path, doc_id))
        summary.chars += len(doc.text)
        summary.tokens += len(tokens) if tokens is not None else 0
        if on_document is not None:
            on_document(doc_id, tokens)
    if progress is not None and files:
        progress(len(files), len(files), files[-1])
    summary.seconds = time.perf_counter() - start
    return summary
