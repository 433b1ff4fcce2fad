"""The decoding knobs (samchat/decoding/params.py) load without torch: the config file, the
settings screen and the CLI's options read them at start-up."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import samchat.decoding.params
from samchat.decoding import METHODS, DecodingConfig, SamplingParams
from samchat.decoding.knobs import knobs
import samchat.chat.config
assert knobs(DecodingConfig) and knobs(SamplingParams) and METHODS
print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
from samchat.decoding import ChatSession  # loads on demand, and needs no torch either
print("torch" in sys.modules, ChatSession.__name__)
"""


def test_decoding_knobs_import_no_torch() -> None:
    result = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "False ChatSession"]


def test_unknown_names_are_attribute_errors() -> None:
    import samchat.decoding

    try:
        samchat.decoding.NoSuchThing  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("samchat.decoding.NoSuchThing did not raise")
    assert "ChatSession" in dir(samchat.decoding)
