"""`samchat bench engines`: times each engine and weight format that can run a GGUF model on
this machine, prints them, and keeps the result, so that the app and `serve` decode on the
fastest (where the engine and dtype are left to auto); each engine's verification costs are
measured and kept too, so that a first reply drafts."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from samchat.cli_options import add_model_options, spec_from_args

if TYPE_CHECKING:
    from samchat.models.engine_choice import EngineSpeed
    from samchat.models.loader import ModelSpec


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "engines",
        help="time each engine/format on this machine and keep the fastest for the app and serve",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the results here too")
    add_model_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from samchat.engines.cpu import cpu_name
    from samchat.models.engine_choice import measure, why
    from samchat.paths import cache_dir, model_cache_dir

    def say(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    from samchat.engines.bandwidth import read_bandwidth

    spec = spec_from_args(args)
    # The read bandwidth swings by minutes on a shared machine: each engine's steps are set
    # against a read timed right after them.
    beside: dict[str, float] = {}

    def read_after(speed: EngineSpeed) -> None:
        measured = read_bandwidth(model_cache_dir(), runs=3)
        if measured is not None:
            beside[speed.label] = measured

    speeds = measure(spec, cache_dir(), say, read_after)
    best = min(speeds, key=lambda s: s.ms_per_token)
    width = max(len(s.label) for s in speeds)
    print(f"one-token steps, {cpu_name()}")
    for s in speeds:
        mark = "  <- the app and serve use this" if s is best else ""
        rate = 1000 / s.ms_per_token
        print(f"{s.label:<{width}}  {s.ms_per_token:6.2f} ms  {rate:6.1f} tok/s{mark}")
    reads = _reads(spec, model_cache_dir(), speeds, beside)
    for line in reads.pop("lines", []):
        print(line)
    if args.json is not None:
        out: dict[str, object] = {"cpu": cpu_name(), "speeds": [asdict(s) for s in speeds]}
        out |= {"chosen": best.label, "why": why(spec, best.engine, cache_dir())}
        out |= {"reads": reads}
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return 0


def _reads(
    spec: ModelSpec, cache: Path, speeds: list[EngineSpeed], beside: dict[str, float]
) -> dict[str, Any]:
    """Each engine's weight bytes read per step as a share of the machine's read bandwidth
    timed right after its steps (printed lines under "lines")."""
    from samchat.engines.bandwidth import step_bytes
    from samchat.models.engine_choice import gguf_file

    path = gguf_file(spec)
    if path is None or not beside:
        return {}
    lines = ["read bandwidth: a 1 GiB read on every thread, timed after each engine's steps"]
    out: dict[str, Any] = {}
    for s in speeds:
        step, bandwidth = step_bytes(s.engine, path, cache), beside.get(s.label)
        if step is None or bandwidth is None:
            continue
        rate = step / (s.ms_per_token / 1000)
        share = rate / bandwidth
        lines.append(
            f"{s.label}: reads {step / 1e6:.0f} MB a step, {rate / 1e9:.1f} GB/s, "
            f"{100 * share:.0f}% of the read bandwidth ({bandwidth / 1e9:.1f} GB/s)"
        )
        out[s.label] = {"step_bytes": step, "share": share, "bandwidth_gbs": bandwidth / 1e9}
    return out | {"lines": lines}
