"""Naming a remote model: `openai:URL[#MODEL]`, `openai:NAME` from config.toml's [endpoints],
the API key from the environment, and a one-line error for each bad name or entry."""

from __future__ import annotations

from pathlib import Path

import pytest

from samchat.chat.config import ConfigError, from_toml_dict, load_config
from samchat.cli import main
from samchat.remote.endpoint import (
    KEY_ENV,
    Endpoint,
    EndpointError,
    endpoints_from_toml,
    parse_source,
)
from samchat.sources import is_remote
from tests.remote.conftest import write_config


def test_a_url_a_name_and_a_model_after_the_hash() -> None:
    team = Endpoint("http://gpu-box:8000/v1", name="team", api_key_env="TEAM_KEY")
    known = {"team": team}
    bare = parse_source("openai:http://localhost:11434/v1/", known)
    assert (bare.endpoint.url, bare.model, bare.endpoint.name) == (
        "http://localhost:11434/v1",
        None,
        "",
    )
    named = parse_source("openai:team#Qwen/Qwen3-8B", known)
    assert named.endpoint is team and named.model == "Qwen/Qwen3-8B"
    assert named.text == "openai:team#Qwen/Qwen3-8B"
    assert "sk-" not in repr(Endpoint("http://h/v1", name="t", api_key="sk-secret"))
    # A URL that an endpoint declares gets its settings (the key's variable among them).
    assert parse_source("openai:http://gpu-box:8000/v1#m", known).endpoint is team
    assert is_remote("openai:team") and not is_remote("ollama:llama3") and not is_remote(None)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("openai:gpu-box", "neither a URL (openai:http://host:8000/v1) nor a configured endpoint"),
        ("openai:", "nothing is neither a URL"),
        ("openai:ftp://host/v1", "is not an http(s) URL"),
        ("openai:http://#model", "is not an http(s) URL"),
        ("openai:http://me:secret@gpu:8000/v1", "a URL with credentials in it"),
    ],
)
def test_a_bad_source_is_one_line(source: str, problem: str) -> None:
    with pytest.raises(EndpointError) as caught:
        parse_source(source, {})
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_the_key_comes_from_config_its_variable_or_samchat_api_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert Endpoint("http://h/v1").key() == ""
    monkeypatch.setenv(KEY_ENV, "from-env")
    assert Endpoint("http://h/v1").key() == "from-env"
    # A configured endpoint gets only the key it names: $SAMCHAT_API_KEY is not sent to it.
    assert Endpoint("http://ollama:11434/v1", name="desktop").key() == ""
    assert Endpoint("http://h/v1", api_key="in-file").key() == "in-file"
    monkeypatch.setenv("TEAM_KEY", "team-secret")
    assert Endpoint("http://h/v1", name="team", api_key_env="TEAM_KEY").key() == "team-secret"
    monkeypatch.delenv("TEAM_KEY")
    with pytest.raises(EndpointError, match=r"reads its API key from \$TEAM_KEY, which is not set"):
        Endpoint("http://h/v1", name="team", api_key_env="TEAM_KEY").key()


def test_endpoints_in_config_toml() -> None:
    cfg = from_toml_dict(
        {
            "model": "openai:team",
            "endpoints": {
                "team": {"url": "http://gpu:8000/v1/", "api_key_env": "K", "timeout": 30},
                "home": {"url": "https://home.example/v1", "context": 32768},
            },
        }
    )
    assert cfg.endpoints["team"] == Endpoint(
        "http://gpu:8000/v1", name="team", api_key_env="K", timeout_s=30.0
    )
    assert cfg.endpoints["home"].context == 32768
    assert "endpoints" not in cfg.to_toml_dict()  # saving settings leaves them to the user


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"team": "http://x/v1"}, "[endpoints.team] must be a table with a url"),
        ({"team": {}}, '[endpoints.team] needs url = "http://host:8000/v1"'),
        ({"team": {"url": "gpu:8000"}}, "is not an http(s) URL"),
        ({"team": {"url": "http://x/v1", "key": "k"}}, "[endpoints.team] has unknown keys: key"),
        ({"team": {"url": "http://x/v1", "timeout": 0}}, "timeout must be a number of seconds"),
        ({"team": {"url": "http://x/v1", "context": "big"}}, "context must be a number of tokens"),
        ({"team": {"url": "http://x/v1", "api_key_env": 3}}, "api_key_env must be a string"),
    ],
)
def test_a_bad_endpoint_entry_is_one_line(table: dict[str, object], problem: str) -> None:
    with pytest.raises(EndpointError) as caught:
        endpoints_from_toml(table)
    assert problem in str(caught.value)
    with pytest.raises(ConfigError):
        from_toml_dict({"endpoints": table})


def test_saving_settings_keeps_the_endpoints_the_user_wrote(tmp_path: Path) -> None:
    from samchat.chat.config import save_config

    path = write_config(
        '# my servers\n[endpoints.team]\nurl = "http://gpu:8000/v1"  # the lab box\n'
    )
    cfg = load_config(path)
    cfg.theme = "samchat-light"
    save_config(cfg, load_config(path), path)
    text = path.read_text()
    assert "# the lab box" in text and 'theme = "samchat-light"' in text
    assert load_config(path).endpoints["team"].url == "http://gpu:8000/v1"


@pytest.mark.parametrize("command", [["serve"], ["bench", "ttft"], ["bench", "decode"]])
def test_commands_that_run_a_model_here_refuse_a_remote_one(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if command == ["bench", "decode"]:  # one question of its own (a checkout may have none)
        questions = tmp_path / "questions.jsonl"
        questions.write_text('{"question_id": 1, "category": "qa", "turns": ["Hi?"]}\n')
        command = [*command, "--questions", str(questions)]
    assert main(["--model", "openai:http://127.0.0.1:9/v1", *command]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: openai:http://127.0.0.1:9/v1 is a model on a server")
    assert "\n" not in err


def test_models_lists_local_ones_despite_a_bad_config(capsys: pytest.CaptureFixture[str]) -> None:
    write_config("[endpoints.team]\nurl = 3\n")
    assert main(["models", "--json"]) == 0
    captured = capsys.readouterr()
    assert '"origin": "default"' in captured.out
    assert captured.err.strip() == (
        '[config: [endpoints.team] needs url = "http://host:8000/v1"; endpoints not listed]'
    )
