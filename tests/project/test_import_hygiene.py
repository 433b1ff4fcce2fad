"""What importing a module drags in, measured in a fresh interpreter.

lint-imports (pyproject.toml) checks samchat's own import graph statically; this checks the
modules really loaded, including what third-party packages pull in, on the paths where it costs
time: the app's start, the commands that never touch a model, the libraries used without a UI.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

UI = ("textual", "rich")
MODEL = ("torch", "transformers")
NO_MODEL = (*MODEL, *UI, "samchat.decoding", "samchat.models")

# (what the fresh interpreter runs, modules that must not be loaded afterwards). A name matches
# itself and its submodules; "pkg.*" matches the submodules only (the package itself may load).
CASES = {
    "sam": ("import samchat.sam, samchat.sam.index", NO_MODEL),
    "bench.index": ("import samchat.bench.index", NO_MODEL),
    "store": ("import samchat.store", (*MODEL, *UI)),
    "corpus.indexing": ("import samchat.corpus.indexing", (*UI, "torch")),
    "chat": ("import samchat.chat.record", UI),
    "decoding": ("import samchat.decoding", (*UI, "samchat.store", "samchat.corpus")),
    "cli": ("import samchat.cli", (*MODEL, *UI, "sqlite_utils", "samchat.commands.*")),
    # No sub-command: the parser the app starts with imports no command module (several pull in
    # sqlite-utils, numpy or rich; the TUI must be up in well under a second).
    "app start path": (
        "from samchat.cli import build_parser, wants_app; "
        "build_parser(with_commands=not wants_app([]))",
        (*MODEL, "sqlite_utils", "samchat.commands.*"),
    ),
    "tui.app": ("import samchat.tui.app", (*MODEL, "samchat.commands")),
}


def loaded_after(statement: str) -> list[str]:
    code = f"{statement}; import json, sys; print(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    modules: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return modules


def matches(module: str, pattern: str) -> bool:
    if pattern.endswith(".*"):
        return module.startswith(pattern[:-1])
    return module == pattern or module.startswith(pattern + ".")


@pytest.mark.parametrize("case", CASES)
def test_import_loads_no_forbidden_module(case: str) -> None:
    statement, forbidden = CASES[case]
    loaded = loaded_after(statement)
    bad = sorted(m for m in loaded if any(matches(m, p) for p in forbidden))
    assert bad == [], f"{statement!r} loads {bad}"


# A reply on the default model and engine, as `samchat ask` gives it: the llama.cpp path reads the
# kept tokenizer with `tokenizers` and decodes with numpy, so it never pays for torch or
# transformers (over a second of imports on a small CPU). Drafts and sampling run too.
LLAMACPP_REPLY = (
    "from samchat.models import ModelSpec, load_model; "
    "from samchat.decoding.session import ChatSession; "
    "from samchat.engines.costs import CostCurve; "
    "from samchat.decoding.params import DecodingConfig, SamplingParams; "
    "lm = load_model(ModelSpec(engine='llamacpp')); "
    "s = ChatSession(lm, DecodingConfig(method='sam+tr'), cost_curve=CostCurve.default('cpu')); "
    "msgs = [{'role': 'user', 'content': 'Count from 1 to 20.'}]; "
    "done = list(s.generate(msgs, SamplingParams(max_new_tokens=24)))[-1]; "
    "list(s.generate(msgs, SamplingParams(max_new_tokens=8, temperature=0.7, seed=1))); "
    "assert done.stats.tokens == 24, done"
)


def test_a_reply_on_llamacpp_loads_no_torch_or_transformers() -> None:
    from samchat.models import ModelSpec, load_tokenizer

    load_tokenizer(ModelSpec())  # the GGUF's tokenizer converted and kept (first use only)
    loaded = loaded_after(LLAMACPP_REPLY)
    bad = sorted(m for m in loaded if any(matches(m, p) for p in (*MODEL, *UI)))
    assert bad == []
    assert "llama_cpp" in loaded and "tokenizers" in loaded


def test_matches() -> None:
    assert matches("torch", "torch") and matches("torch.nn", "torch")
    assert not matches("torchvision", "torch")
    assert matches("samchat.commands.ask", "samchat.commands.*")
    assert not matches("samchat.commands", "samchat.commands.*")
