"""Does torch.compile with a static KV cache pay for the torch engine on this CPU?

Times, after `--context` cached tokens, a forward of n new tokens (1 = a plain step, more = a
verification) three ways, in turns so that load from elsewhere hits all alike:
- samchat: the torch engine as it decodes (kernels fitted by measurement on this machine);
- static: the model's own forward on transformers' StaticCache, eager;
- compiled: the same, through torch.compile (inductor), one graph per n (compile time shown).
Prints one table (median ms of --rounds forwards) and whether the compiled outputs equal the
eager ones. Run: .venv/bin/python scripts/compile_eval.py [--rows 1,4,8] [--dtype float32]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from transformers import StaticCache

from samchat.engines.cpu import cpu_name
from samchat.engines.torch.engine import TorchEngine, hf_model
from samchat.models import load_model
from samchat.models.loader import ModelSpec


def _static_step(model: Any, cache: Any, ids: torch.Tensor, start: int) -> torch.Tensor:
    n = ids.shape[1]
    for layer in cache.layers:  # the layers count what they hold: rewind to `start`
        if getattr(layer, "is_initialized", False):
            layer.cumulative_length.fill_(start)
    pos = torch.arange(start, start + n).unsqueeze(0)
    out = model(input_ids=ids, past_key_values=cache, cache_position=pos[0], position_ids=pos)
    logits: torch.Tensor = out.logits[0]
    return logits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,4,8")
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    args = ap.parse_args()
    rows = [int(r) for r in args.rows.split(",")]
    torch.manual_seed(0)

    lm = load_model(ModelSpec(engine="torch", dtype=args.dtype))
    engine = TorchEngine(lm)
    engine.meter.fit()
    ref = hf_model(load_model(ModelSpec(engine="torch", dtype=args.dtype)).model)  # unpatched
    ctx = torch.randint(0, int(lm.vocab_size), (1, args.context))
    engine.prefill(ctx[0].tolist())
    cache = StaticCache(config=ref.config, max_cache_len=args.context + max(rows) + 1)
    with torch.inference_mode():
        _static_step(ref, cache, ctx, 0)
    compiled = torch.compile(ref, dynamic=False)

    print(f"CPU: {cpu_name()}; torch {torch.__version__}; {args.dtype}; context {args.context}")
    print("| rows | samchat ms | static eager ms | compiled ms | compile s | compiled = eager |")
    print("|---:|---:|---:|---:|---:|---|")
    for n in rows:
        new = torch.randint(0, int(lm.vocab_size), (1, n))
        with torch.inference_mode():
            t0 = time.perf_counter()
            got = _static_step(compiled, cache, new, args.context)
            compile_s = time.perf_counter() - t0
            want = _static_step(ref, cache, new, args.context)
        same = bool(torch.equal(got.argmax(-1), want.argmax(-1)))
        diff = float((got - want).abs().max())
        times: dict[str, list[float]] = {"samchat": [], "static": [], "compiled": []}
        with torch.inference_mode():
            for rnd in range(args.rounds + 1):  # round 0 warms up
                for name in times:
                    t0 = time.perf_counter()
                    if name == "samchat":
                        engine.forward(new[0].tolist())
                        engine.crop(args.context)
                    else:
                        model = compiled if name == "compiled" else ref
                        _static_step(model, cache, new, args.context)
                    if rnd:
                        times[name].append(time.perf_counter() - t0)
        ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(
            f"| {n} | {ms['samchat']:.1f} | {ms['static']:.1f} | {ms['compiled']:.1f} | "
            f"{compile_s:.0f} | argmax {'same' if same else 'differs'}, max |diff| {diff:.2g} |"
        )


if __name__ == "__main__":
    main()
