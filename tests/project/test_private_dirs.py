"""What samchat creates is private: directories 0700, files 0600; exports follow the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from samchat import paths
from samchat.chat.config import Config, save_config
from samchat.cli import main
from samchat.corpus.indexing import IndexManager, index_root
from samchat.store import Store


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o002, 0o000])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_created_dirs_are_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: int
) -> None:
    for name in ("DATA", "CACHE", "CONFIG"):
        monkeypatch.setenv(f"SAMCHAT_{name}_DIR", str(tmp_path / "new" / name.lower()))
    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(tmp_path / "new" / "models"))
    for made in (paths.data_dir(), paths.cache_dir(), paths.config_dir(), paths.model_cache_dir()):
        assert _mode(made) == 0o700, made
    with Store.open(paths.data_dir() / "samchat.db") as store:
        assert _mode(index_root(store)) == 0o700
        manager = IndexManager(store, "fp", lambda t: list(t.encode()), 0)
        manager.open()
        manager.close()
        assert _mode(manager.directory) == 0o700
        assert _mode(store.path) == 0o600
        for side in store.path.parent.glob("samchat.db-*"):
            assert _mode(side) == 0o600, side
    # A store opened by path in a directory that does not exist yet.
    with Store.open(tmp_path / "elsewhere" / "deeper" / "x.db") as store:
        assert _mode(store.path.parent) == 0o700 and _mode(store.path) == 0o600
    saved = save_config(Config(theme="ember"), Config(), tmp_path / "cfg" / "config.toml")
    assert _mode(saved.parent) == 0o700


def test_a_directory_the_user_chose_keeps_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    monkeypatch.setenv("SAMCHAT_DATA_DIR", str(shared))
    assert paths.data_dir() == shared and _mode(shared) == 0o755


def test_a_default_dir_an_older_samchat_made_0755_is_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "share" / "samchat"
    old.mkdir(parents=True)
    old.chmod(0o755)
    monkeypatch.delenv("SAMCHAT_DATA_DIR")
    monkeypatch.setattr(paths, "user_data_dir", lambda app: str(tmp_path / "share" / app))
    assert paths.data_dir() == old
    assert _mode(old) == 0o700


def test_exports_follow_the_umask(tmp_path: Path, umask: int) -> None:
    data = tmp_path / "data"
    with Store.open(data / "samchat.db") as store:
        chat = store.create_chat("exported")
        store.add_message(chat, "user", "hello", None)
    out = tmp_path / "chat.md"
    assert main(["export", str(chat), "-o", str(out), "--data-dir", str(data)]) == 0
    assert out.read_text().startswith("# exported")
    assert _mode(out) == 0o666 & ~umask
