"""What importing a module drags in, measured in a fresh interpreter.

lint-imports (pyproject.toml) checks samchat's own import graph statically; this checks the
modules really loaded, including what third-party packages pull in, on the paths where it costs
time: the app's start, the commands that never touch a model, the libraries used without a UI.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

UI = ("textual", "rich")
MODEL = ("torch", "transformers")
NO_MODEL = (*MODEL, *UI, "samchat.decoding", "samchat.models")

# (what the fresh interpreter runs, modules that must not be loaded afterwards). A name matches
# itself and its submodules; "pkg.*" matches the submodules only (the package itself may load).
CASES = {
    "sam": ("import samchat.sam, samchat.sam.index", NO_MODEL),
    "bench.index": ("import samchat.bench.index", NO_MODEL),
    "store": ("import samchat.store", (*MODEL, *UI)),
    "corpus.indexing": ("import samchat.corpus.indexing", (*UI, "torch")),
    "chat": ("import samchat.chat.record", UI),
    "decoding": ("import samchat.decoding", (*UI, "samchat.store", "samchat.corpus")),
    "cli": ("import samchat.cli", (*MODEL, *UI, "sqlite_utils", "samchat.commands.*")),
    # No sub-command: the parser the app starts with imports no command module (several pull in
    # sqlite-utils, numpy or rich; the TUI must be up in well under a second).
    "app start path": (
        "from samchat.cli import build_parser, wants_app; "
        "build_parser(with_commands=not wants_app([]))",
        (*MODEL, "sqlite_utils", "samchat.commands.*"),
    ),
    "tui.app": ("import samchat.tui.app", (*MODEL, "samchat.commands")),
}


def loaded_after(statement: str) -> list[str]:
    code = f"{statement}; import json, sys; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return modules


def matches(module: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return module.startswith(pattern[:-1])
    return module == pattern or module.startswith(pattern + ".")


@pytest.mark.parametrize("case", CASES)
def test_import_loads_no_forbidden_module(case: str) -> None:
    statement, forbidden = CASES[case]
    loaded = loaded_after(statement)
    bad = sorted(m for m in loaded if any(matches(m, p) for p in forbidden))
    assert bad == [], f"{statement!r} loads {bad}"


def test_matches() -> None:
    assert matches("torch", "torch") and matches("torch.nn", "torch")
    assert not matches("torchvision", "torch")
    assert matches("samchat.commands.ask", "samchat.commands.*")
    assert not matches("samchat.commands", "samchat.commands.*")
