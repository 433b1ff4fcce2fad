"""One hash over greedy replies and every step's drafting decision, with fixed cost curves: a
refactor of the decoder that changes no behaviour gives the same hash before and after.

    python scripts/decision_hash.py [OUT.json]      # run it on both checkouts and compare
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from samchat.decoding import ChatSession, DecodingConfig, SamplingParams, StepStats, TextDelta
from samchat.engines.costs import DEFAULT_CPU, CostCurve
from samchat.models import load_model
from samchat.models.loader import ModelSpec

QUESTIONS = [
    "List the first ten prime numbers, then list them again in reverse order.",
    "Write a Python function that returns the factorial of n, then explain it line by line.",
    "Repeat this sentence three times: the quick brown fox jumps over the lazy dog.",
]


def decisions() -> dict[str, Any]:
    lm = load_model(ModelSpec(engine="torch", dtype="float32"))
    out: dict[str, Any] = {}
    curves = (("cpu", CostCurve(dict(DEFAULT_CPU), fixed=True)), ("flat", CostCurve.flat()))
    for name, curve in curves:
        for method in ("sam+tr", "tr", "sam"):
            session = ChatSession(lm, DecodingConfig(method=method), cost_curve=curve)
            history: list[Any] = []
            for q in QUESTIONS:
                history.append({"role": "user", "content": q})
                steps, text = [], []
                params = SamplingParams(max_new_tokens=96, temperature=0.0)
                for ev in session.generate(history, params):
                    if isinstance(ev, StepStats):
                        steps.append((ev.drafter, ev.draft_size, ev.accepted))
                    elif isinstance(ev, TextDelta):
                        text.append(ev.text)
                reply = "".join(text)
                history.append({"role": "assistant", "content": reply})
                out[f"{name}/{method}/{q[:20]}"] = {"text": reply, "steps": steps}
    return out


def main() -> int:
    out = decisions()
    print(hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest())
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
