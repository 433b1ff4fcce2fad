"""The command line's conventions, as a user meets them: real processes, a real SQLite file.

Exit codes (0 ok, 1 error, 2 usage, 130 interrupted), an unknown command naming the valid ones,
--json on the listing commands, `samchat config path|show`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from samchat.cli import command_names
from samchat.decoding.knobs import knobs
from samchat.decoding.params import DecodingConfig, SamplingParams
from samchat.store import Store
from tests.terminal import as_from_a_terminal


def env_for(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["HF_HUB_OFFLINE"] = "1"
    env["SAMCHAT_DATA_DIR"] = str(home / "data")
    return env


def samchat(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "samchat", *args],
        capture_output=True,
        text=True,
        env=env_for(home),
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_an_error_exits_1_and_a_usage_error_2(tmp_path: Path) -> None:
    missing = samchat(tmp_path, "ask", "--model", str(tmp_path / "no-such-model"), "hi")
    assert missing.returncode == 1
    [line] = error_lines(missing)
    assert "does not exist" in line
    usage = samchat(tmp_path, "ask", "--temperature", "-1", "hi")  # argparse refuses it
    assert usage.returncode == 2 and "--temperature" in usage.stderr
    assert samchat(tmp_path, "history").returncode == 0


def test_an_unknown_command_lists_the_valid_ones(tmp_path: Path) -> None:
    for argv in (("frobnicate",), ("--data-dir", str(tmp_path), "frobnicate", "history")):
        result = samchat(tmp_path, *argv)
        assert result.returncode == 2
        assert result.stdout == ""
        [line] = result.stderr.splitlines()
        assert line.startswith("error: unknown command 'frobnicate'; valid commands: ")
        listed = line.split("valid commands: ", 1)[1].split(", ")
        assert listed == sorted(command_names())
        assert {"ask", "models", "config", "doctor", "index", "corpus"} <= set(listed)


def _state(pid: int) -> str:
    """The process's scheduler state from /proc: R running, S sleeping (waiting to read)..."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_ctrl_c_exits_130(tmp_path: Path) -> None:
    """`samchat rm` waits at its confirmation prompt (a terminal on stdin); Ctrl-C there ends
    it with 130 and one `[cancelled]` line, and nothing is deleted."""
    import pty

    (tmp_path / "data").mkdir(mode=0o700)
    with Store.open(tmp_path / "data" / "samchat.db") as store:
        chat_id = store.create_chat("keep me")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "samchat", "rm", str(chat_id)],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_for(tmp_path),
        preexec_fn=as_from_a_terminal,
    )
    os.close(slave)
    try:
        assert proc.stdout is not None
        seen = b""
        while b"[y/N]" not in seen:  # the prompt is out: it now waits for an answer
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            assert ready, f"no prompt came: {seen!r}"
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"samchat rm ended before asking: {seen!r}"
            seen += chunk
        # Printing the prompt comes just before the read: a signal in between would only be
        # seen after the read returns, as with a real Ctrl-C typed that fast. Wait for the read.
        for _ in range(2400):
            if _state(proc.pid) == "S":
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert err.decode().strip().splitlines()[-1] == "[cancelled]"
    with Store.open(tmp_path / "data" / "samchat.db") as store:
        assert store.chat(chat_id).title == "keep me"


def test_doctor_json(tmp_path: Path) -> None:
    result = samchat(tmp_path, "doctor", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["data dir"] == str(tmp_path / "data")
    assert report["SAM core"] and report["torch"] and report["python"]
    plain = samchat(tmp_path, "doctor")
    labels = {line.split("  ", 1)[0] for line in plain.stdout.splitlines()}
    assert labels == set(report)


def test_index_status_and_corpus_list_json(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Kettles\n\nA kettle boils water for tea.\n")
    (docs / "b.txt").write_text("Suffix automata find repeated text quickly.\n")
    imported = samchat(tmp_path, "import", str(docs))
    assert imported.returncode == 0, imported.stderr
    status = samchat(tmp_path, "index", "status", "--json")
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    with Store.open(tmp_path / "data" / "samchat.db") as store:
        counts = store.counts()
    assert report["database"] == {"documents": counts["documents"], "messages": 0}
    assert report["documents"] == counts["documents"] == 2
    assert report["tokens"] > 0 and report["missing"] == 0 and report["fingerprint"]

    listing = samchat(tmp_path, "corpus", "list", "--json")
    assert listing.returncode == 0, listing.stderr
    packs = json.loads(listing.stdout)
    assert packs and all(not p["installed"] and p["documents"] == 0 for p in packs)
    from samchat.corpus.packs import packs as bundled

    assert [p["name"] for p in packs] == [p.name for p in bundled()]
    assert all(p["files"] == len(b.files) for p, b in zip(packs, bundled(), strict=True))


def test_config_path_and_show(tmp_path: Path) -> None:
    config_dir = Path(os.environ["SAMCHAT_CONFIG_DIR"])
    path = samchat(tmp_path, "config", "path")
    assert path.returncode == 0
    assert path.stdout.strip() == str(config_dir / "config.toml")

    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "config.toml").write_text(
        '# mine\ntheme = "ember"\n\n[sampling]\ntemperature = 0.25\n', encoding="utf-8"
    )
    shown = samchat(tmp_path, "config", "show")
    assert shown.returncode == 0, shown.stderr
    effective = tomllib.loads(shown.stdout)
    assert effective["theme"] == "ember"
    assert effective["sampling"]["temperature"] == 0.25
    # Every knob is there, the ones the file leaves out at their defaults.
    assert effective["decoding"]["method"] == DecodingConfig().method
    assert effective["sampling"]["max_new_tokens"] == SamplingParams().max_new_tokens
    assert set(effective["decoding"]) == {k.name for k in knobs(DecodingConfig)}

    (config_dir / "config.toml").write_text("[sampling]\ntemperature = -3\n", encoding="utf-8")
    bad = samchat(tmp_path, "config", "show")
    assert bad.returncode == 1
    [line] = error_lines(bad)
    assert "temperature" in line


def test_saving_the_config_keeps_comments_and_unknown_keys(tmp_path: Path) -> None:
    from samchat.chat.config import load_config, save_config

    path = tmp_path / "config.toml"
    path.write_text(
        "# my samchat settings\n"
        'theme = "ember"  # the warm one\n'
        "future_option = 3\n"
        "\n"
        "[sampling]\n"
        "# a little creativity\n"
        "temperature = 0.7\n"
        "seed = 5\n"
        "\n"
        "[plugins]\n"
        'name = "mine"\n',
        encoding="utf-8",
    )
    cfg = load_config(path)
    read = load_config(path)
    cfg.device = "cpu"
    # seed None (random): TOML has no null, so the key goes
    cfg.sampling = dataclasses.replace(cfg.sampling, temperature=0.3, seed=None)
    cfg.keymap = {"samchat.help": "f10"}
    save_config(cfg, read, path)
    text = path.read_text(encoding="utf-8")
    for kept in ("# my samchat settings", "# the warm one", "# a little creativity"):
        assert kept in text
    data = tomllib.loads(text)
    assert data["future_option"] == 3 and data["plugins"] == {"name": "mine"}
    assert data["device"] == "cpu" and data["sampling"]["temperature"] == 0.3
    assert "seed" not in data["sampling"]
    assert load_config(path) == cfg
    read = load_config(path)
    cfg.keymap = {}
    save_config(cfg, read, path)
    assert load_config(path) == cfg and "# the warm one" in path.read_text(encoding="utf-8")


def test_the_configuration_reference_documents_every_key_and_variable() -> None:
    """docs/configuration.md names every config.toml key and every variable samchat reads."""
    import re

    from samchat.chat.config import Config

    root = Path(__file__).resolve().parents[2]
    doc = (root / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([^`]+)` \|", doc, flags=re.M))
    top = {k for k, v in Config().to_toml_dict().items() if not isinstance(v, dict)}
    assert top <= rows
    for cls in (DecodingConfig, SamplingParams):
        for knob in knobs(cls):
            assert knob.name in rows, knob.name
            assert knob.help in doc, knob.name
    read = set()
    for source in (root / "samchat").rglob("*.py"):
        text = source.read_text(encoding="utf-8")
        read |= set(re.findall(r"""environ(?:\.get)?[\[(]\s*["']((?:SAMCHAT|HF)_[A-Z_]+)""", text))
        read |= set(re.findall(r"""_dir\(\s*["'](SAMCHAT_[A-Z_]+)""", text))  # paths.py
        read |= set(re.findall(r"""["'](OLLAMA_[A-Z_]+|HF_HUB_[A-Z_]+|HF_HOME)["']""", text))
    assert {"SAMCHAT_DATA_DIR", "SAMCHAT_MODEL_CACHE", "HF_HUB_OFFLINE", "OLLAMA_MODELS"} <= read
    missing = {name for name in read if f"`{name}`" not in doc}
    assert not missing, f"undocumented environment variables: {sorted(missing)}"
