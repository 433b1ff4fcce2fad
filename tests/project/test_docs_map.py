"""docs/ARCHITECTURE.md is the map a newcomer reads first: every module it names exists."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "ARCHITECTURE.md"


def test_every_module_the_architecture_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    paths = set(re.findall(r"\bsamchat/[\w/]+(?:\.py)?", text))
    dotted = set(re.findall(r"\bsamchat(?:\.[a-z_]\w*)+", text))
    assert paths and dotted
    missing = [p for p in sorted(paths) if not (ROOT / p).exists()]
    for name in sorted(dotted):
        # A dotted name is a module, or a name inside one (samchat.engines.registry.ENGINES).
        module, attr = name, ""
        while importlib.util.find_spec(module) is None and "." in module:
            module, _, last = module.rpartition(".")
            attr = f"{last}.{attr}" if attr else last
        if importlib.util.find_spec(module) is None:
            missing.append(name)
            continue
        if attr:
            obj = importlib.import_module(module)
            for part in attr.split("."):
                obj = getattr(obj, part, None)
            if obj is None:
                missing.append(name)
    assert missing == [], f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def _map_sections() -> dict[str, str]:
    """The module map, by top-level package: "samchat/decoding/" -> the lines under it."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## Module map")
    block = text[text.index("```", start) + 3 : text.index("```", text.index("```", start) + 3)]
    sections: dict[str, str] = {}
    current = ""
    for line in block.splitlines():
        if line.startswith("samchat/"):
            current = line.split()[0]
        sections[current] = sections.get(current, "") + line + "\n"
    return sections


def test_the_map_names_every_module() -> None:
    """Each module of the package appears in the map under its top-level package (a file of a
    sub-package, engines/torch/engine.py, under samchat/engines/)."""
    sections = _map_sections()
    unnamed = []
    for path in sorted((ROOT / "samchat").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        parts = path.relative_to(ROOT).parts
        section = f"{parts[0]}/{parts[1]}/" if len(parts) > 2 else "samchat/"
        if not re.search(rf"(?<![\w.]){re.escape(path.name)}\b", sections.get(section, "")):
            unnamed.append("/".join(parts))
    assert unnamed == [], f"docs/ARCHITECTURE.md's map does not name: {unnamed}"


def test_the_architecture_stays_a_map() -> None:
    """A map, not API listings that drift: at most 250 lines."""
    assert len(DOC.read_text(encoding="utf-8").splitlines()) <= 250
