"""`samchat db path`: where the database file is, for sqlite-utils, Datasette or a backup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from samchat.cli import main
from samchat.store import Store


def test_db_path_prints_the_file_the_store_opens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAMCHAT_DATA_DIR", str(tmp_path / "elsewhere"))  # --data-dir wins
    data = tmp_path / "data"
    assert main(["db", "path", "--data-dir", str(data)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{data / 'samchat.db'}\n"
    assert "no database there yet" in err and len(err.strip().splitlines()) == 1
    assert not (data / "samchat.db").exists()  # printing the path creates no database
    # --data-dir is passed down, not through the environment (child processes, later code)
    assert os.environ["SAMCHAT_DATA_DIR"] == str(tmp_path / "elsewhere")

    with Store.open(data / "samchat.db") as store:
        store.create_chat("kept")
        assert store.path == data / "samchat.db"
    assert main(["db", "path", "--data-dir", str(data)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{data / 'samchat.db'}\n" and err == ""


def test_db_path_honours_the_environment_and_is_absolute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAMCHAT_DATA_DIR", "relative")
    assert main(["db", "path"]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'relative' / 'samchat.db'}\n"


def test_db_path_with_a_file_for_a_data_dir_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAMCHAT_DATA_DIR", str(tmp_path))  # restored after the test
    not_a_dir = tmp_path / "notes.txt"
    not_a_dir.write_text("mine")
    assert main(["db", "path", "--data-dir", str(not_a_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1 and captured.err.startswith("error: ")
    assert "Traceback" not in captured.err
    assert not_a_dir.read_text() == "mine"
