"""Every decoding and sampling knob, declared once in samchat/decoding/params.py, reaches the
settings form and config.toml: one form row per knob, each knob round-trips through the file and
a bad value of each is a one-line ConfigError."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomlkit
from textual.widgets import Input, Label, Select, Switch
from tui_helpers import wait_for

from samchat.chat.config import (
    Config,
    ConfigError,
    load_config,
    save_config,
)
from samchat.decoding.params import DecodingConfig, Knob, SamplingParams, knobs, to_mapping
from samchat.tui.app import SamchatApp
from samchat.tui.screens import settings as settings_screen
from samchat.tui.screens.settings import SettingsScreen

# Knobs deliberately left out of the settings form, and why.
NOT_IN_FORM = {
    # A list of arbitrary strings ("\n\n" is a usual one) that one input line cannot hold;
    # config.toml (an array of strings) and `samchat ask --stop` set it.
    "stop",
}
ALL_KNOBS = [*knobs(DecodingConfig), *knobs(SamplingParams)]


def knob_ids(k: Knob) -> str:
    return k.qualified


def other_value(k: Knob) -> Any:
    """A valid value different from the default."""
    if k.choices:
        return next(c for c in reversed(k.choices) if c != k.default)
    if k.type is bool:
        return not k.default
    if k.type is tuple:
        return ("\n\nUser:", 'say "end"', "a,b")
    if k.type is int:
        return 42 if k.default is None else k.default + 3
    if k.maximum is not None:  # a float in a bounded range: its middle
        low = k.minimum if k.minimum is not None else k.exclusive_minimum
        assert low is not None
        return (low + k.maximum) / 2
    return float(k.default) + 0.5


def bad_values(k: Knob) -> list[Any]:
    """Values of the wrong type, and out of range where the knob has a range."""
    wrong: dict[type[Any], list[Any]] = {
        bool: [1, "true"],
        int: [1.5, True, "3"],
        float: [True, "hot"],
        str: [3, "magic"],
        tuple: ["x", [1]],
    }
    out = list(wrong[k.type])
    if k.minimum is not None and k.name != "seed":  # negative seeds: see the legacy test
        out.append(k.minimum - (1 if k.type is int else 0.5))
    if k.exclusive_minimum is not None:
        out.append(k.exclusive_minimum)
    if k.maximum is not None:
        out.append(k.maximum + 1)
    return out


def write_config(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomlkit.dumps(data), encoding="utf-8")


def test_the_config_holds_every_knob_with_its_declared_default() -> None:
    cfg = Config()
    assert to_mapping(cfg.decoding) == {k.name: k.default for k in knobs(DecodingConfig)}
    assert to_mapping(cfg.sampling) == {k.name: k.default for k in knobs(SamplingParams)}


@pytest.mark.parametrize("knob", ALL_KNOBS, ids=knob_ids)
def test_config_file_round_trips_every_knob(knob: Knob, tmp_path: Path) -> None:
    cfg = Config()
    if knob.section == "decoding":
        setattr(cfg.decoding, knob.name, other_value(knob))
        table: object = cfg.decoding
    else:  # SamplingParams is frozen: a changed copy
        cfg.sampling = dataclasses.replace(cfg.sampling, **{knob.name: other_value(knob)})
        table = cfg.sampling
    path = save_config(cfg, Config(), tmp_path / "config.toml")
    saved = tomllib.loads(path.read_text(encoding="utf-8"))
    written = saved[knob.section][knob.name]
    assert (tuple(written) if knob.type is tuple else written) == getattr(table, knob.name)
    assert load_config(path) == cfg


@pytest.mark.parametrize("knob", ALL_KNOBS, ids=knob_ids)
def test_a_bad_value_of_every_knob_is_a_one_line_config_error(knob: Knob, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    for value in bad_values(knob):
        write_config(path, {knob.section: {knob.name: value}})
        with pytest.raises(ConfigError) as caught:
            load_config(path)
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(f"config: {knob.qualified}")
        assert f"{value!r}" in message
        assert (", ".join(knob.choices) if knob.choices else knob.allowed) in message


def test_unknown_knobs_are_refused_with_the_known_ones(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    write_config(path, {"decoding": {"max_drafts": 4}})
    with pytest.raises(
        ConfigError, match=r"^config: unknown decoding setting 'max_drafts'; known: "
    ):
        load_config(path)


def test_legacy_seed_minus_one_means_random(tmp_path: Path) -> None:
    """Config files written before seeds could be unset say `seed = -1` for random."""
    path = tmp_path / "config.toml"
    path.write_text("[sampling]\nseed = -1\ntemperature = 0.7\n", encoding="utf-8")
    cfg = load_config(path)
    assert cfg.sampling.seed is None and cfg.sampling.temperature == 0.7
    cfg.sampling = dataclasses.replace(cfg.sampling, temperature=0.5)
    save_config(cfg, load_config(path), path)  # only what changed is written: seed stays as is
    assert tomllib.loads(path.read_text(encoding="utf-8"))["sampling"]["seed"] == -1
    assert load_config(path) == cfg
    path.write_text("[sampling]\nseed = 7\n", encoding="utf-8")
    assert load_config(path).sampling.seed == 7


def notices(app: SamchatApp) -> list[str]:
    return [n.message for n in app._notifications]


async def test_settings_form_has_one_row_per_knob(
    make_app: Callable[..., SamchatApp], config_path: Path
) -> None:
    assert set(settings_screen.EXCLUDED) == NOT_IN_FORM
    write_config(config_path, {"sampling": {"stop": ["\n\nUser:"], "seed": 5}})
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, SettingsScreen))
        screen = app.screen
        rows = list(screen.query("#settings-form .field"))
        expected = [k for k in ALL_KNOBS if k.name not in NOT_IN_FORM]
        assert [row.query_one(".field-name", Label).content for row in rows] == [
            k.name for k in expected
        ]
        for row, k in zip(rows, expected, strict=True):
            widget = row.query_one(f"#set-{k.name}")
            kind = Select if k.choices else Switch if k.type is bool else Input
            assert isinstance(widget, kind), (k.name, widget)
            assert row.query_one(".field-help", Label).content == k.help
        assert screen.query_one("#set-seed", Input).value == "5"

        # A bad value is refused with a notice naming the knob; the screen stays.
        screen.query_one("#set-seed", Input).value = "-1"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is screen
        assert any("sampling.seed" in n and "got -1" in n for n in notices(app))

        screen.query_one("#set-method", Select).value = "tr"
        screen.query_one("#set-adaptive", Switch).value = False
        screen.query_one("#set-reserve_tokens", Input).value = "128"
        screen.query_one("#set-static_context", Input).value = "64"
        screen.query_one("#set-top_p", Input).value = "1"  # an integer for a float knob
        screen.query_one("#set-seed", Input).value = ""  # empty = random
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: not isinstance(app.screen, SettingsScreen))
    saved = tomllib.loads(config_path.read_text(encoding="utf-8"))
    assert saved["decoding"]["method"] == "tr"
    assert saved["decoding"]["adaptive"] is False
    assert saved["decoding"]["reserve_tokens"] == 128
    assert saved["decoding"]["static_context"] == 64
    assert "top_p" not in saved["sampling"]  # "1" is the value it had: not a change
    assert app.cfg.sampling.top_p == 1.0 and isinstance(app.cfg.sampling.top_p, float)
    assert "seed" not in saved["sampling"]
    assert saved["sampling"]["stop"] == ["\n\nUser:"]  # no row: kept as it was
    assert app.cfg.sampling.seed is None and app.cfg.sampling.stop == ("\n\nUser:",)
    assert app.cfg.decoding == DecodingConfig(
        method="tr", adaptive=False, reserve_tokens=128, static_context=64
    )
