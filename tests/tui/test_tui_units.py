"""Unit tests of the TUI's plain-Python parts: config, themes, live figures, code blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from samchat.chat.config import ConfigError, from_toml_dict, load_config, parse_sampling
from samchat.chat.live_stats import LiveStats, format_stats
from samchat.figures import StoredStats
from samchat.tui.code_blocks import code_blocks
from samchat.tui.themes import ThemeFileError, load_themes, theme_from_dict


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"sampling": {"top_p": 0.0}}, "top_p"),
        ({"sampling": {"max_new_tokens": 0}}, "max_new_tokens"),
        ({"sampling": {"temperature": "hot"}}, "temperature"),
        ({"sampling": {"beam": 4}}, "unknown sampling setting"),
        ({"decoding": {"method": "magic"}}, "decoding.method"),
        ({"decoding": {"max_draft": -1}}, "max_draft"),
        ({"decoding": {"alpha": 0}}, "alpha must be an integer >= 1, got 0"),
        ({"keymap": {"samchat.help": 1}}, "keymap"),
        ({"theme": 3}, "theme"),
        ({"documents": {"relevance": 2}}, r"\[documents\] relevance must be from 0 to 1, not 2"),
        ({"documents": {"passages": 0}}, r"\[documents\] passages must be a whole number"),
    ],
)
def test_bad_config_values_name_the_problem(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        from_toml_dict(section)


def _record(stored: dict[str, object]) -> StoredStats:
    record = StoredStats.parse(stored)
    assert record is not None
    return record


def test_missing_config_gives_defaults(tmp_path: Path) -> None:
    cfg = load_config(tmp_path / "none.toml")
    assert cfg.theme == "samchat-dark" and cfg.decoding.method == "sam+tr"
    assert parse_sampling({}).max_new_tokens == 512


def test_theme_files_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ThemeFileError, match="name"):
        theme_from_dict({"primary": "#fff"}, "x.toml")
    with pytest.raises(ThemeFileError, match="bad colour"):
        theme_from_dict({"name": "x", "primary": "#fff", "accent": "no-such-colour"}, "x.toml")
    (tmp_path / "a.toml").write_text(
        'name = "a"\nprimary = "#112233"\n[variables]\nprov-tr = "red"\n'
    )
    (tmp_path / "b.toml").write_text("not toml [")
    themes, problems = load_themes([tmp_path])
    assert [t.name for t in themes] == ["a"]
    assert themes[0].variables["prov-tr"] == "red" and "prov-dyn" in themes[0].variables
    assert len(problems) == 1 and "b.toml" in problems[0]


def test_bundled_themes_include_a_light_one() -> None:
    themes, problems = load_themes()
    assert problems == []
    names = {t.name for t in themes}
    assert len(names) >= 4
    assert any(not t.dark for t in themes)


def test_live_figures_then_final_ones() -> None:
    live = LiveStats(started=10.0)
    live.on_step(0.05)  # a draft step faster than plain (a lucky timing) does not price plain
    live.on_delta(2, ["dyn", "plain"], 10.05)
    assert live.speedup_est == 0.0  # no plain step timed in this reply yet: unknown
    live = LiveStats(started=10.0)
    live.on_step(0.1, plain=True)
    live.on_delta(1, ["plain"], 10.1)
    live.on_step(0.2)  # a 4-token draft step costs twice a plain one here
    live.on_delta(4, ["dyn", "dyn", "tr", "plain"], 10.3)
    assert live.tokens == 5 and live.steps == 2
    assert live.mat == pytest.approx(2.5)
    # Decoding speed, as the engine counts it: the prompt's reading (before the first text)
    # is left out, so the 4 tokens after the first came in 0.2 s.
    assert live.tokens_per_s == pytest.approx(4 / 0.2)
    # Priced as the engine's figure is: tokens/s x one plain step timed in this reply.
    assert live.speedup_est == pytest.approx(4 / 0.2 * 0.1)
    assert live.shares() == pytest.approx({"dyn": 0.4, "static": 0.0, "tr": 0.2})
    assert live.speeds == pytest.approx([10.0, 20.0])
    final = {
        "tokens": 5,
        "tokens_per_s": 12.0,
        "mat": 2.5,
        "speedup_est": 1.4,
        "accepted_by_drafter": {"dyn": 2, "tr": 1, "plain": 2},
        "seconds": 0.4,
    }
    live.on_done(_record(final))
    assert (live.tokens_per_s, live.speedup_est) == (12.0, 1.4)
    assert live.shown_at_end == pytest.approx((20.0, 2.0))  # what the bar showed last
    assert "dyn 40% static 0% tr 20%" in format_stats(_record(final))


def test_live_speed_counts_from_the_start_of_decoding_as_the_engine_does() -> None:
    """A first text of many drafted tokens (a reply copying an earlier one) counts: the rate
    is every token over the time since decoding began (the first step's end less its
    forward), as the engine's final figure is, not the tokens after the first text."""
    live = LiveStats(started=10.0)
    live.on_step(0.1, plain=False, t=10.2)  # the prompt was read by 10.1
    live.on_delta(30, ["dyn"] * 29 + ["plain"], 10.2)
    live.on_step(0.1, plain=True, t=10.3)
    live.on_delta(1, ["plain"], 10.3)
    assert live.decode_t == pytest.approx(10.1)
    assert live.tokens_per_s == pytest.approx(31 / 0.2)
    assert live.speedup_est == pytest.approx(31 / 0.2 * 0.1)


def test_remote_figures_are_speed_and_first_token_only() -> None:
    """A server's reply: no MAT, speedup or drafter shares, which would read as zeros."""
    from samchat.tui.widgets.stats_bar import stats_content

    live = LiveStats(started=10.0)
    assert not live.remote
    live.on_delta(1, ["remote"], 10.4)
    live.on_delta(1, ["remote"], 10.5)
    assert live.remote and live.ttft == pytest.approx(0.4) and live.tokens == 2
    bar = str(stats_content(live, "streaming"))
    assert "first token 0.40 s" in bar and "remote" in bar and "MAT" not in bar
    final = {"tokens": 2, "seconds": 0.1, "tokens_per_s": 20.0, "ttft_s": 0.42}
    live.on_done(_record({**final, "method": "remote", "finish_reason": "length"}))
    assert live.remote and live.ttft == 0.42 and live.tokens_per_s == 20.0
    remote = _record({**final, "method": "remote", "finish_reason": "interrupted"})
    line = format_stats(remote)
    assert line == "2 tok · 0.10 s · 20.0 tok/s · first token 0.42 s · remote · interrupted"
    stopped = _record({**final, "method": "remote", "finish_reason": "stop"})
    assert "interrupted" not in format_stats(stopped)


def test_code_blocks() -> None:
    text = "Intro\n\n```py\na = 1\n```\n\nThen:\n\n    indented\n\nand `inline` only."
    assert code_blocks(text) == ["a = 1\n", "indented\n"]
    assert code_blocks("no code at all") == []
