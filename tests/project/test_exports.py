"""Every name a module of samchat advertises in `__all__` imports: `from samchat.X import name`
works for each (a lazy package's map can point at the wrong module, and only an import shows it)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "samchat"


def _advertised() -> dict[str, list[str]]:
    """module -> the names in its `__all__`, read from the source (importing every module of
    the package to find them would load the app, torch and llama.cpp for nothing)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) else None
            if isinstance(node, ast.AnnAssign):
                target = node.target
            if isinstance(target, ast.Name) and target.id == "__all__" and node.value:
                names = ast.literal_eval(node.value)
                parts = path.relative_to(ROOT).with_suffix("").parts
                module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                found[module] = list(names)
    return found


ADVERTISED = _advertised()


def test_the_package_advertises_names() -> None:
    assert {"samchat.decoding", "samchat.engines", "samchat.sam"} <= set(ADVERTISED)


@pytest.mark.parametrize("module", sorted(ADVERTISED))
def test_every_name_in_all_imports(module: str) -> None:
    names = ADVERTISED[module]
    assert len(names) == len(set(names)), f"{module}.__all__ repeats a name"
    loaded = importlib.import_module(module)
    missing = []
    for name in names:
        try:
            getattr(loaded, name)  # what `from module import name` does, lazy packages included
        except AttributeError as exc:
            missing.append(f"{name}: {exc}")
    assert missing == [], f"{module}.__all__ names what does not import: {missing}"
