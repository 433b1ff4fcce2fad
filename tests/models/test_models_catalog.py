"""The models a user already has: Ollama's store, LM Studio's folders, the Hugging Face cache and
GGUF files loaded before, listed by `samchat models` and loaded with --model. The layouts are
built for real in temporary directories from the bundled default model (its GGUF, and its
converted safetensors copy)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from samchat.engines.torch.conversion import convert_gguf
from samchat.errors import ModelLoadError
from samchat.models.default import bundled_gguf, converted_dir

PROGRESS = "measuring this machine's verification cost"


def link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ollama_store(root: Path) -> Path:
    """An Ollama store holding the default GGUF as `smol` (tag latest), as `ollama pull`
    leaves it: a manifest per tag, content-addressed blobs without a suffix."""
    gguf = bundled_gguf()
    model_digest = sha256(gguf)
    blob = root / "blobs" / f"sha256-{model_digest}"
    link_or_copy(gguf, blob)
    template = b"{{ .Prompt }}"
    template_digest = hashlib.sha256(template).hexdigest()
    (root / "blobs" / f"sha256-{template_digest}").write_bytes(template)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                   "digest": f"sha256:{template_digest}", "size": len(template)},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.template",
             "digest": f"sha256:{template_digest}", "size": len(template)},
            {"mediaType": "application/vnd.ollama.image.model",
             "digest": f"sha256:{model_digest}", "size": gguf.stat().st_size},
        ],
    }  # fmt: skip
    library = root / "manifests" / "registry.ollama.ai" / "library" / "smol"
    library.mkdir(parents=True)
    (library / "latest").write_text(json.dumps(manifest))
    # A model whose blob was deleted: not offered.
    broken = root / "manifests" / "registry.ollama.ai" / "someone" / "gone"
    broken.mkdir(parents=True)
    missing = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "0" * 64}
    (broken / "v1").write_text(json.dumps({**manifest, "layers": [missing]}))
    return blob


def hf_repo(hub: Path, repo_id: str, files: dict[str, Path | bytes]) -> Path:
    """A repo in a Hugging Face hub cache as huggingface_hub writes it: blobs named by their
    hash, a snapshot of symlinks into them, refs/main naming the snapshot."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    for name, content in files.items():
        if isinstance(content, Path):
            blob = repo / "blobs" / sha256(content)
            link_or_copy(content, blob)
        else:
            blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
            blob.write_bytes(content)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    return snapshot


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)  # the test's own SAMCHAT_* dirs (conftest), fresh per test
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env.update(
        HF_HUB_OFFLINE="1",
        HOME=str(home),
        SAMCHAT_DATA_DIR=str(tmp_path / "data"),
        OLLAMA_MODELS=str(tmp_path / "no-ollama"),
        HF_HUB_CACHE=str(tmp_path / "no-hub"),
    )
    env.pop("HF_HOME", None)
    env.update(extra)
    return env


def samchat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "samchat", *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=600,
    )


def listed(env: dict[str, str], *options: str) -> list[dict[str, Any]]:
    result = samchat(env, "models", "--json", *options)
    assert result.returncode == 0, result.stderr
    entries: list[dict[str, Any]] = json.loads(result.stdout)
    return entries


def test_ollama_models_load_by_name_and_their_blobs_by_path(tmp_path: Path) -> None:
    """About a minute: a model at a new path is timed after its first reply, and the test
    checks that a real first use answers at once (plainly), then measures once and says so."""
    blob = ollama_store(tmp_path / "ollama")
    env = env_for(tmp_path, OLLAMA_MODELS=str(tmp_path / "ollama"))
    entries = listed(env)
    assert entries[0]["origin"] == "default" and entries[0]["source"] == ""
    assert entries[0]["path"] == str(bundled_gguf())
    [ollama] = [e for e in entries if e["origin"] == "ollama"]  # the broken one is left out
    assert ollama == {
        "source": "ollama:smol", "name": "smol:latest", "origin": "ollama", "format": "gguf",
        "path": str(blob), "size": bundled_gguf().stat().st_size,
    }  # fmt: skip

    ask = ("ask", "--engine", "llamacpp", "--max-new-tokens", "8", "--no-save")
    by_name = samchat(env, *ask, "--model", "ollama:smol", "Name a colour.")
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.strip()
    # The first reply with a model runs plainly, then the verification cost is measured once,
    # and it says so; the next reply finds it measured.
    assert sum(PROGRESS in line for line in by_name.stderr.splitlines()) == 1
    assert "timing drafts on this CPU once" in by_name.stderr
    again = samchat(env, *ask, "--model", "ollama:smol", "Name a colour.")
    assert again.returncode == 0 and again.stdout == by_name.stdout
    assert PROGRESS not in again.stderr and "timing drafts" not in again.stderr
    assert "%|" not in by_name.stderr  # no third-party progress bar leaks out

    # A GGUF is known by its header, not its name: a copy without a suffix loads, answers the
    # same (greedy; plain decoding equals speculative decoding), and is remembered.
    copy = tmp_path / "elsewhere" / "my-model"
    link_or_copy(blob, copy)
    by_path = samchat(env, *ask, "--method", "plain", "--model", str(copy), "Name a colour.")
    assert by_path.returncode == 0, by_path.stderr
    assert by_path.stdout == by_name.stdout
    recent = [e for e in listed(env) if e["origin"] == "recent"]
    assert [(e["source"], e["format"]) for e in recent] == [(str(copy.resolve()), "gguf")]
    # The list lives in the data directory: --data-dir keeps its own.
    other = str(tmp_path / "other-data")
    second = tmp_path / "elsewhere" / "second.gguf"
    link_or_copy(blob, second)
    again = samchat(
        env, "--data-dir", other, *ask, "--method", "plain", "--model", str(second), "Hi"
    )
    assert again.returncode == 0, again.stderr
    recent_other = [
        e["source"] for e in listed(env, "--data-dir", other) if e["origin"] == "recent"
    ]
    assert recent_other == [str(second.resolve())]
    assert [e["source"] for e in listed(env) if e["origin"] == "recent"] == [str(copy.resolve())]

    missing = samchat(env, *ask, "--model", "ollama:nope:7b", "hi")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    [line] = [x for x in missing.stderr.splitlines() if x.startswith("error:")]
    assert "Ollama model nope:7b not found" in line and "ollama pull nope:7b" in line


def test_lmstudio_and_hugging_face_models_are_listed(tmp_path: Path) -> None:
    gguf = bundled_gguf()
    env = env_for(tmp_path, HF_HUB_CACHE=str(tmp_path / "hub"))
    studio = Path(env["HOME"]) / ".lmstudio" / "models" / "acme" / "Smol-GGUF"
    link_or_copy(gguf, studio / "smol-Q4_1.gguf")
    link_or_copy(gguf, studio / "mmproj-smol-f16.gguf")  # a vision projector, not a model
    (studio / "README.gguf").write_text("not a model")  # the suffix alone proves nothing

    converted = convert_gguf(bundled_gguf(), converted_dir(), lambda _: None)
    hub = tmp_path / "hub"
    chat = hf_repo(hub, "acme/tiny-chat", {p.name: p for p in converted.iterdir()})
    hf_repo(hub, "acme/encoder", {"config.json": b'{"architectures": ["BertModel"]}'})
    only_gguf = hf_repo(hub, "acme/tiny-gguf", {"README.md": b"# q4", "tiny.Q4_1.gguf": gguf})

    entries = listed(env)
    by_source = {e["source"]: e for e in entries}
    assert set(by_source) == {
        "",
        str(studio / "smol-Q4_1.gguf"),
        "acme/tiny-chat",
        str(only_gguf / "tiny.Q4_1.gguf"),
    }
    assert by_source["acme/tiny-chat"]["path"] == str(chat)
    assert by_source["acme/tiny-chat"]["format"] == "hf"
    assert by_source["acme/tiny-chat"]["origin"] == "huggingface"
    assert by_source[str(studio / "smol-Q4_1.gguf")]["origin"] == "lmstudio"
    assert by_source[str(studio / "smol-Q4_1.gguf")]["name"] == "acme/Smol-GGUF/smol-Q4_1"

    table = samchat(env, "models")
    assert table.returncode == 0 and "acme/tiny-chat" in table.stdout


def test_a_hub_id_in_the_local_cache_loads_offline(tmp_path: Path) -> None:
    converted = convert_gguf(bundled_gguf(), converted_dir(), lambda _: None)
    hf_repo(tmp_path / "hub", "acme/tiny-chat", {p.name: p for p in converted.iterdir()})
    env = env_for(tmp_path, HF_HUB_CACHE=str(tmp_path / "hub"))
    ask = ("ask", "--engine", "torch", "--method", "plain", "--max-new-tokens", "6", "--no-save")
    cached = samchat(env, *ask, "--model", "acme/tiny-chat", "Name a colour.")
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout.strip()
    assert "%|" not in cached.stderr  # no third-party progress bar leaks out
    absent = samchat(env, *ask, "--model", "acme/not-downloaded", "hi")
    assert absent.returncode == 1
    [line] = [x for x in absent.stderr.splitlines() if x.startswith("error:")]
    assert "HF_HUB_OFFLINE" in line and str(tmp_path / "hub") in line


def test_the_torch_engine_converts_a_gguf_once_after_a_memory_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    from samchat.engines.torch import conversion
    from samchat.engines.torch.conversion import gguf_parameters
    from samchat.models.loader import ModelSpec, load_model

    cache = tmp_path / "model-cache"
    monkeypatch.setenv("SAMCHAT_MODEL_CACHE", str(cache))
    blob = tmp_path / "blobs" / "sha256-abc"  # no suffix, as in Ollama's store
    link_or_copy(bundled_gguf(), blob)
    spec = ModelSpec(source=str(blob), engine="torch")

    # Too little memory for float32 weights: refused before anything is de-quantised.
    with monkeypatch.context() as patch:
        patch.setattr(conversion, "available_memory", lambda: 64 * 2**20)
        with pytest.raises(ModelLoadError) as refused:
            load_model(spec)
    message = str(refused.value)
    assert "\n" not in message and "--engine llamacpp" in message and "0.1 GiB" in message
    assert not list(cache.glob("gguf-*"))

    said: list[str] = []
    first = load_model(spec, progress=said.append)
    assert any("converting" in s for s in said)
    assert "de-quantizing" not in capfd.readouterr().err  # transformers' tqdm bar stays off
    [converted] = cache.glob("gguf-*")
    weights = (converted / "model.safetensors").stat().st_size
    params = gguf_parameters(blob)
    assert abs(weights - 4 * params) < 0.01 * weights  # float32 weights: 4 bytes each
    assert sum(p.numel() for p in first.model.parameters()) == params
    del first

    said.clear()
    again = load_model(spec, progress=said.append)
    assert not any("converting" in s for s in said)
    assert list(cache.glob("gguf-*")) == [converted]
    assert again.engine == "torch" and again.name == "sha256-abc"
