"""What samchat's torch engine does on a GPU: run on a machine with CUDA, in well under 8 minutes.

    python scripts/gpu_check.py [--device cuda] [--json out.json] [--quick]

Reports, as Markdown (and JSON with --json):
- the verification cost curve (time of n new tokens after 512 cached ones, relative to one) of a
  randomly initialised ~1B Llama shape in bf16 built on the device, and of the default model;
- the time per step spent outside the forward (drafting, acceptance, bookkeeping), in ms;
- greedy equality of speculative (sam+tr) against plain decoding of the default model, in bf16
  and fp32, token for token, on real prompts, with ordinary steps and with CUDA graphs
  (`--cuda-graphs`), and the tokens/s of each; it fails (exit 1) where the engine promises
  identical output (fp32) and breaks it; bf16, which the engine says can differ, is reported;
- whether bitsandbytes 4-bit loading works (CUDA only).

On a CPU (`--device cpu --quick`) it runs the same code on small shapes: the test suite does,
so the script keeps working where no GPU is.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number.",
    "List the planets of the solar system in order from the sun.",
    "Explain in two sentences why the sky is blue.",
    "Translate to French: The cat sleeps on the warm windowsill.",
)
# A ~1B Llama (TinyLlama-like shape); --quick shrinks it for CPU runs.
BIG = {
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
}
SMALL = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def random_llama(device: torch.device, dtype: torch.dtype, quick: bool) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=32000, max_position_embeddings=4096, attn_implementation="sdpa",
        **(SMALL if quick else BIG),
    )  # fmt: skip
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    return model.eval()


def cost_curve(model: Any, device: torch.device, quick: bool) -> dict[str, Any]:
    from samchat.engines.torch.measure import measure_cost_curve

    t0 = time.perf_counter()
    curve = measure_cost_curve(model, device, context=64 if quick else 512, reps=1 if quick else 4)
    return {
        "relative_cost": {k: round(v, 3) for k, v in curve.to_dict().items()},
        "kernels": curve.kernels.describe() if curve.kernels else None,
        "seconds": round(time.perf_counter() - t0, 1),
    }


def decode(
    lm: Any, method: str, prompt: str, max_new: int, quick: bool = False
) -> tuple[list[int], float, float, int, str | None]:
    """One greedy reply: (token ids, seconds, seconds in forwards, steps, why the engine does
    not promise output identical to plain).
    `quick` prices verification as free and keeps the default kernels instead of measuring
    each engine's curve: the largest trees, and the CPU run's minutes go to checking, not
    timing (the curves are measured once, above)."""
    from samchat.decoding import ChatSession, DecodingConfig, SamplingParams, StepStats, TextDelta
    from samchat.engines.costs import CostCurve
    from samchat.names import METHODS, named

    curve = CostCurve.flat() if quick else None
    config = DecodingConfig(method=named(method, METHODS))
    session = ChatSession(lm, config, None, curve, measure_first=not quick)
    params = SamplingParams(max_new_tokens=max_new, temperature=0.0)
    messages = [{"role": "user", "content": prompt}]
    for _ in session.generate(messages, SamplingParams(max_new_tokens=2, temperature=0.0)):
        pass  # loads the lazy parts and fits the kernels before anything is timed
    ids: list[int] = []
    forward = 0.0
    steps = 0
    t0 = time.perf_counter()
    for event in session.generate(messages, params):
        if isinstance(event, TextDelta):
            ids.extend(event.token_ids)
        elif isinstance(event, StepStats):
            forward += event.forward_s
            steps += 1
    seconds = time.perf_counter() - t0
    return ids, seconds, forward, steps, session.engine.inexact_reason


def equality(device: str, dtype: str, quick: bool, steps: str = "dynamic") -> dict[str, Any]:
    """sam+tr against plain decoding of the default model, both with the engine's `steps`
    ("graphs": CUDA graphs; "static": the same fixed shapes run eagerly, for a CPU)."""
    import dataclasses

    from samchat.models.loader import ModelSpec, load_model
    from samchat.names import STEP_MODES, named

    lm = load_model(ModelSpec(engine="torch", device=device, dtype=dtype))
    lm = dataclasses.replace(lm, steps=named(steps, STEP_MODES))
    max_new = 24 if quick else 128
    prompts = PROMPTS[:1] if quick else PROMPTS
    same = 0
    overhead_ms: list[float] = []
    inexact: str | None = None
    tokens = {"plain": 0, "sam+tr": 0}
    spent = {"plain": 0.0, "sam+tr": 0.0}
    for prompt in prompts:
        plain, plain_s, _, _, _ = decode(lm, "plain", prompt, max_new, quick)
        spec, seconds, forward, n_steps, inexact = decode(lm, "sam+tr", prompt, max_new, quick)
        same += plain == spec
        tokens["plain"] += len(plain)
        tokens["sam+tr"] += len(spec)
        spent["plain"] += plain_s
        spent["sam+tr"] += seconds
        if n_steps:
            overhead_ms.append(1000 * (seconds - forward) / n_steps)
    return {
        "dtype": dtype,
        "steps": steps,
        "tokens_per_s": {k: round(tokens[k] / max(spent[k], 1e-9), 1) for k in tokens},
        "identical": f"{same}/{len(prompts)}",
        "all_identical": same == len(prompts),
        # Only a promise can fail: in half precision (any device) the engine says replies may
        # differ, so a difference there is reported, not a failure (on CPUs it varies by CPU).
        "promised_identical": inexact is None,
        "overhead_ms_per_step": round(sorted(overhead_ms)[len(overhead_ms) // 2], 2)
        if overhead_ms
        else None,
    }


def bnb_4bit(device: torch.device) -> dict[str, Any] | str:
    """4-bit bitsandbytes weights: they load, and sam+tr against plain decoding on them."""
    if device.type != "cuda":
        return "not checked (needs CUDA)"
    from samchat.errors import SamchatError
    from samchat.models.loader import ModelSpec, load_model

    try:
        lm = load_model(ModelSpec(engine="torch", device="cuda", quantize="4bit"))
    except SamchatError as exc:
        return f"failed: {exc}"
    plain, plain_s, *_ = decode(lm, "plain", PROMPTS[0], 64)
    spec, spec_s, _, _, inexact = decode(lm, "sam+tr", PROMPTS[0], 64)
    return {
        "tokens": len(spec),
        "identical": plain == spec,
        "promised_identical": inexact is None,
        "tokens_per_s": {
            "plain": round(len(plain) / plain_s, 1),
            "sam+tr": round(len(spec) / spec_s, 1),
        },
    }


def _section(out: dict[str, Any], name: str, json_path: Path | None, run: Any) -> None:
    """One part of the report; a part that fails is reported with its traceback, and the rest
    still run (a GPU lease is too short to rerun everything for one broken part)."""
    import traceback

    t0 = time.perf_counter()
    try:
        out[name] = run()
    except Exception:  # reported with its traceback below, not swallowed
        out[name] = {"error": traceback.format_exc()}
    print(f"## {name} ({time.perf_counter() - t0:.1f} s)\n{json.dumps(out[name], indent=1)}\n")
    sys.stdout.flush()
    if json_path:
        json_path.write_text(json.dumps(out, indent=1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--quick", action="store_true", help="small shapes and short replies")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device here; pass --device cpu", file=sys.stderr)
        return 1
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    out: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "big_model_dtype": "bfloat16" if bf16 or device.type == "cpu" else "float16",
    }
    print(f"# gpu_check on {out['device']} (torch {out['torch']})\n")
    big_dtype = torch.bfloat16 if out["big_model_dtype"] == "bfloat16" else torch.float16
    _section(
        out, "random_1b_curve", args.json,
        lambda: cost_curve(random_llama(device, big_dtype, args.quick), device, args.quick),
    )  # fmt: skip
    if device.type == "cuda":
        torch.cuda.empty_cache()
    from samchat.models.loader import ModelSpec, load_model

    def default_curve() -> dict[str, Any]:
        default = load_model(ModelSpec(engine="torch", device=args.device))
        return cost_curve(default.model, device, args.quick)

    _section(out, "default_model_curve", args.json, default_curve)
    # Fixed-shape steps: CUDA graphs on a GPU; on a CPU the same shapes run eagerly, in
    # float32 only (bfloat16 verification on a CPU rounds unlike one-row steps: inexact).
    runs = [("bfloat16", "dynamic"), ("float32", "dynamic"), ("float32", "static")]
    if device.type == "cuda":
        runs = [(dt, st) for dt in ("bfloat16", "float32") for st in ("dynamic", "graphs")]
    out["equality"] = []
    for dt, st in runs:
        _section(
            out,
            "run",
            args.json,
            lambda dt=dt, st=st: equality(args.device, dt, args.quick, st),
        )
        eq = out.pop("run")
        out["equality"].append(eq if "error" not in eq else {"dtype": dt, "steps": st, **eq})
        if "error" not in eq:
            print(
                f"- default model {dt}, {st} steps: sam+tr identical to plain "
                f"{eq['identical']}{'' if eq['promised_identical'] else ' (not promised)'}, "
                f"tokens/s {eq['tokens_per_s']}, "
                f"{eq['overhead_ms_per_step']} ms per step outside the forward\n"
            )
    _section(out, "bitsandbytes_4bit", args.json, lambda: bnb_4bit(device))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    parts = [(k, v) for k, v in out.items() if k != "equality"] + [
        (f"equality {e['dtype']} {e['steps']}", e) for e in out["equality"]
    ]
    failed = [name for name, part in parts if isinstance(part, dict) and "error" in part]
    broken = [
        e for e in out["equality"]
        if "error" not in e and e["promised_identical"] and not e["all_identical"]
    ]  # fmt: skip
    for e in broken:
        print(
            f"error: {e['dtype']} {e['steps']} steps promise output identical to plain and "
            f"gave {e['identical']}",
            file=sys.stderr,
        )
    for name in failed:
        print(f"error: {name} failed:\n{dict(parts)[name]['error']}", file=sys.stderr)
    return 1 if broken or failed else 0


if __name__ == "__main__":
    sys.exit(main())
