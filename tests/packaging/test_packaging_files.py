"""packaging/: the desktop entry, the cibuildwheel configuration and the Homebrew formula agree
with pyproject.toml (what can be checked without Docker, macOS or Homebrew; packaging/README.md
says how each is built and tested for real)."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"


def project() -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return data


def test_desktop_entry_starts_the_command_in_a_terminal() -> None:
    entry = configparser.ConfigParser(interpolation=None, strict=True)
    entry.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    entry.read_string((PACKAGING / "samchat.desktop").read_text(encoding="utf-8"))
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application"
    assert desktop["Terminal"] == "true"
    assert desktop["Exec"].split()[0] in project()["scripts"]
    assert desktop["Name"] and desktop["Comment"]
    assert desktop["Categories"].endswith(";")  # a list, as the spec writes it


def test_cibuildwheel_builds_every_supported_cpython_with_the_compiled_core() -> None:
    config = tomllib.loads((PACKAGING / "cibuildwheel.toml").read_text())["tool"]["cibuildwheel"]
    minimum = re.fullmatch(r">=3\.(\d+)", project()["requires-python"])
    assert minimum is not None
    built = {int(m) for m in re.findall(r"cp3(\d+)-\*", config["build"])}
    assert min(built) == int(minimum.group(1))
    assert config["environment"]["SAMCHAT_REQUIRE_MYPYC"] == "1"
    for platform in ("linux", "macos", "windows"):
        env = config.get(platform, {}).get("environment", config["environment"])
        assert env["SAMCHAT_REQUIRE_MYPYC"] == "1", platform
    assert any("sam.backend() == 'compiled'" in cmd for cmd in config["test-command"])


def test_homebrew_formula_matches_the_project() -> None:
    formula = (PACKAGING / "homebrew" / "samchat.rb").read_text()
    assert f'license "{project()["license"]}"' in formula
    assert 'generate_completions_from_executable(bin/"samchat", "completion")' in formula
    assert "scripts/fetch_default_model.py" in formula
    assert 'ENV["SAMCHAT_REQUIRE_MYPYC"] = "1"' in formula


def test_packaging_readme_names_every_piece() -> None:
    readme = (PACKAGING / "README.md").read_text()
    for path in PACKAGING.rglob("*"):
        if path.is_file() and path.name != "README.md":
            assert path.name in readme, f"packaging/README.md does not mention {path.name}"
