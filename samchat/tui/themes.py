"""Theme files (TOML) -> textual Theme objects: the bundled themes/ directory and the user's."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from textual.app import App
from textual.theme import Theme

from samchat import paths
from samchat.errors import SamchatError

_COLOR_KEYS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
# Provenance colours every theme gets when its file does not set them.
PROVENANCE_DEFAULTS = {"prov-dyn": "#56d6c6", "prov-static": "#e5c07b", "prov-tr": "#c678dd"}


class ThemeFileError(SamchatError):
    """A theme file is unreadable or malformed."""


def bundled_theme_dir() -> Path:
    """samchat/themes/: package data, so the themes ship in wheels too."""
    return Path(__file__).resolve().parents[1] / "themes"


def user_theme_dir() -> Path:
    return paths.config_dir() / "themes"


def theme_from_dict(data: Mapping[str, object], source: str) -> Theme:
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise ThemeFileError(f"theme {source}: missing 'name'")
    if not isinstance(data.get("primary"), str):
        raise ThemeFileError(f"theme {source}: missing 'primary' colour")
    colors: dict[str, Any] = {}  # Theme's colour arguments: strings, or None
    for key in _COLOR_KEYS:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ThemeFileError(f"theme {source}: '{key}' must be a colour string")
        colors[key] = value
    variables = data.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ThemeFileError(f"theme {source}: [variables] must map names to strings")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeFileError(f"theme {source}: 'dark' must be true or false")
    theme = Theme(name=name, dark=dark, variables={**PROVENANCE_DEFAULTS, **variables}, **colors)
    try:  # resolve colours now so a typo is reported here, not as a crash on activation
        theme.to_color_system().generate()
    except Exception as exc:
        raise ThemeFileError(f"theme {source}: bad colour ({exc})") from exc
    return theme


def load_theme_file(path: Path) -> Theme:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ThemeFileError(f"theme file {path}: {exc}") from exc
    return theme_from_dict(data, str(path))


def load_themes(dirs: list[Path] | None = None) -> tuple[list[Theme], list[str]]:
    """All themes in the bundled and user directories (later ones override by name).

    Returns (themes, problems): a broken user file is reported, never fatal.
    """
    if dirs is None:
        dirs = [bundled_theme_dir(), user_theme_dir()]
    by_name: dict[str, Theme] = {}
    problems: list[str] = []
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            try:
                theme = load_theme_file(path)
            except ThemeFileError as exc:
                problems.append(str(exc))
                continue
            by_name[theme.name] = theme
    return list(by_name.values()), problems


def install_themes(app: App[None], name: str, dirs: list[Path] | None = None) -> list[str]:
    """Registers the bundled and user themes with app and selects `name` (else the default);
    returns the problems to tell the user (a bad theme file, an unknown name)."""
    themes, problems = load_themes(dirs)
    for theme in themes:
        app.register_theme(theme)
    if name in app.available_themes:
        app.theme = name
    else:
        problems.append(f"unknown theme {name!r}; using the default")
        if "samchat-dark" in app.available_themes:
            app.theme = "samchat-dark"
    return problems
