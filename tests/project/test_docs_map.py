"""docs/ARCHITECTURE.md is the map a newcomer reads first: every module path it names exists,
by its path (engines/torch/forward.py is not passed by a mention of native/forward.py), and the
map names every module of the package."""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "samchat"
DOC = ROOT / "docs" / "ARCHITECTURE.md"

# A module path (dir/name.py, a bare name.py, forward.cpp, tiles.h, app.tcss) or a folder (dir/),
# with or without the samchat/ prefix; not a piece of a longer path, a URL or a dotted name.
MENTION = re.compile(
    r"(?<![\w./-])((?:[A-Za-z_]\w*/)*(?:[A-Za-z_]\w*\.(?:py|cpp|h|tcss)\b|[A-Za-z_]\w*/(?![\w/-])))"
)
NOT_PATHS = {"llama.cpp"}  # the project's name, not a file
ENTRY_INDENT = 8  # map lines indented more continue the entry above (its description column)


def _mentions(text: str) -> Iterator[str]:
    for match in MENTION.finditer(text):
        if match.group(1) not in NOT_PATHS:
            yield match.group(1)


def _within(base: Path) -> list[Path]:
    """base and the folders above it, up to the repository's root: where a name is looked up."""
    out = [base]
    while out[-1] != ROOT:
        out.append(out[-1].parent)
    return out


def _map_block() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("```", text.index("## Module map")) + 3
    return text[start : text.index("```", start)]


def _resolve_map() -> tuple[set[Path], list[str]]:
    """Each name in the module map, resolved by its place in the tree: under the section's
    folder (samchat/engines/), the sub-folder entry above it (torch/), and any folder the entry
    named before it on its lines (native/ (forward.cpp, ...)); the first that exists, looking
    inside out, is the file named. Returns (the paths named, the names that resolve nowhere)."""
    named: set[Path] = set()
    missing: list[str] = []
    stack: list[tuple[int, Path]] = []  # (indent, folder) of the section and sub-folder entries
    context: list[Path] = []  # inner first: folders the current entry opened, then its base
    for line in _map_block().splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if line.startswith("samchat/"):
            stack = [(-1, ROOT / line.split()[0])]
            context = [stack[0][1]]
        elif indent <= ENTRY_INDENT:
            while len(stack) > 1 and stack[-1][0] >= indent:
                stack.pop()
            context = [stack[-1][1]]
            first = line.split()[0]
            if first.endswith("/"):  # a sub-folder entry: the entries indented under it are in it
                stack.append((indent, stack[-1][1] / first.rstrip("/")))
        for name in _mentions(line):
            found = next(
                (
                    base / name
                    for folder in context
                    for base in _within(folder)
                    if (base / name).exists()
                ),
                None,
            )
            if found is None:
                missing.append(f"{name} (module map, under {context[-1].relative_to(ROOT)}/)")
                continue
            named.add(found)
            if found.is_dir():
                context.insert(0, found)
    return named, missing


def _package_paths() -> list[Path]:
    return [p for p in PACKAGE.rglob("*") if "__pycache__" not in p.parts]


def _resolve_prose(name: str, package: list[Path]) -> set[Path]:
    """A name outside the map: from the root, from samchat/, or as the end of exactly one path
    in the package (widgets/conversation.py); more than one match is ambiguous."""
    rel = name.rstrip("/")
    found = {p for p in (ROOT / rel, PACKAGE / rel) if p.exists()}
    found |= {p for p in package if p.as_posix().endswith("/" + rel)}
    return found


def test_every_module_path_the_architecture_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    block = _map_block()
    prose = text.replace(block, "")
    package = _package_paths()
    named, missing = _resolve_map()
    assert named
    for name in sorted(set(_mentions(prose))):
        found = _resolve_prose(name, package)
        if len(found) != 1:
            where = ", ".join(sorted(p.relative_to(ROOT).as_posix() for p in found))
            missing.append(f"{name} ({'ambiguous: ' + where if found else 'nowhere'})")
    assert missing == [], f"docs/ARCHITECTURE.md names what does not exist: {missing}"


def test_every_dotted_name_the_architecture_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    dotted = set(re.findall(r"\bsamchat(?:\.[a-z_]\w*)+", text))
    assert dotted
    missing = []
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


def test_the_map_names_every_module_at_its_path() -> None:
    """Each module of the package (and the native forward's sources) is named in the map where
    it lives: a mention of native/forward.py does not name engines/torch/forward.py."""
    named, _ = _resolve_map()
    unnamed = [
        p.relative_to(ROOT).as_posix()
        for p in sorted(_package_paths())
        if p.suffix in (".py", ".cpp", ".h") and p.name != "__init__.py" and p not in named
    ]
    assert unnamed == [], f"docs/ARCHITECTURE.md's map does not name: {unnamed}"


def test_the_architecture_stays_a_map() -> None:
    """A map, not API listings that drift: at most 250 lines."""
    assert len(DOC.read_text(encoding="utf-8").splitlines()) <= 250
