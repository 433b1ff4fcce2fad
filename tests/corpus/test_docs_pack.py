"""The samchat-docs corpus pack is the documentation as built, never a drifting hand copy."""

from __future__ import annotations

import subprocess
from pathlib import Path

from samchat.corpus.packs import pack

ROOT = Path(__file__).resolve().parents[2]


def test_docs_pack_is_the_current_documentation() -> None:
    docs = pack("samchat-docs")
    sources = {
        "README.md": ROOT / "README.md",
        "ARCHITECTURE.md": ROOT / "docs" / "ARCHITECTURE.md",
    }
    assert {f.name for f in docs.files} == set(sources)
    for f in docs.files:
        assert f.read_bytes() == sources[f.name].read_bytes(), f"{f.name}: run `make setup`"


def test_docs_pack_copies_are_not_in_git() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "samchat/corpora/samchat-docs"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert tracked == ["samchat/corpora/samchat-docs/manifest.toml"]
