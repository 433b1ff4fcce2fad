"""Streaming over `samchat serve` against in-process decoding (`samchat ask`), side by side.

    .venv/bin/python scripts/serve_bench.py --prompts 6 --max-tokens 128

The same first turns of Spec-Bench questions go, greedy, once through a ChatSession in this
process and once through a `samchat serve` subprocess (same model, engine and method) streamed
by the `openai` package, alternating so that both see the same machine load. It reports
end-to-end tokens/s for both (request to last token) and the API's cost in per cent, and the
time to the first token at the client against the engine's own (the `samchat` field's ttft_s).
Both start from empty data directories, so neither drafts from a static index.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from samchat.bench.decode import default_questions_path, load_questions  # noqa: E402
from samchat.decoding.params import METHODS  # noqa: E402


@dataclass
class Run:
    text: str
    tokens: int
    wall_s: float  # request (or generate() call) to the last token
    ttft_s: float  # to the first token, as the caller saw it
    engine_ttft_s: float  # the engine's own generate() call to its first token

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_server(env: dict[str, str], engine: str, method: str, log: Path) -> tuple[Any, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "samchat", "serve", "--port", str(port)]
    cmd += ["--engine", engine, "--method", method]
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"samchat serve exited: {log.read_text()}")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.5)
    proc.kill()
    sys.exit("samchat serve did not start in 10 minutes")


def via_api(client: Any, prompt: str, max_tokens: int) -> Run:
    t0 = time.perf_counter()
    first = 0.0
    parts: list[str] = []
    figures: dict[str, Any] = {}
    for chunk in client.chat.completions.create(
        model="samchat",
        messages=[{"role": "user", "content": prompt}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
    ):
        if chunk.choices and chunk.choices[0].delta.content:
            if not parts:
                first = time.perf_counter() - t0
            parts.append(chunk.choices[0].delta.content)
        if chunk.model_extra and "samchat" in chunk.model_extra:
            figures = chunk.model_extra["samchat"]
    wall = time.perf_counter() - t0
    return Run("".join(parts), int(figures["tokens"]), wall, first, float(figures["ttft_s"]))


def in_process(session: Any, prompt: str, max_tokens: int) -> Run:
    from samchat.decoding import ReplyDone, SamplingParams, TextDelta

    params = SamplingParams(max_new_tokens=max_tokens)
    t0 = time.perf_counter()
    first = 0.0
    done: Any = None
    for event in session.generate([{"role": "user", "content": prompt}], params, threading.Event()):
        if isinstance(event, TextDelta) and not first and event.text:
            first = time.perf_counter() - t0
        elif isinstance(event, ReplyDone):
            done = event
    wall = time.perf_counter() - t0
    return Run(done.text, done.stats.tokens, wall, first, done.stats.ttft_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=6, help="first turns measured")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--engine", default="auto", help="auto, torch or llamacpp")
    parser.add_argument("--method", default="sam+tr", choices=METHODS)
    parser.add_argument("--questions", type=Path, default=None, help="Spec-Bench JSONL")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    import openai

    from samchat.decoding import ChatSession, DecodingConfig
    from samchat.models import load_model
    from samchat.models.loader import ModelSpec

    questions = load_questions(args.questions or default_questions_path())
    prompts = [q.turns[0] for q in questions[: args.prompts + 1]]  # the first one warms up
    home = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for name in ("DATA", "CONFIG"):
        env[f"SAMCHAT_{name}_DIR"] = str(home / name.lower())
    os.environ.update(env)

    server, url = start_server(env, args.engine, args.method, home / "serve.log")
    try:
        # The engine and format the server takes (measured fastest here, where left to auto).
        from samchat import paths
        from samchat.models.engine_choice import preferred

        spec = preferred(ModelSpec(engine=args.engine), paths.cache_dir())
        lm = load_model(spec)
        session = ChatSession(lm, DecodingConfig(method=args.method))
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
        rows: list[tuple[Run, Run]] = []
        for i, prompt in enumerate(prompts):
            local = in_process(session, prompt, args.max_tokens)
            api = via_api(client, prompt, args.max_tokens)
            if i:
                rows.append((local, api))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)

    head = f"{lm.name}, engine {lm.engine}/{spec.dtype}, method {args.method}"
    print(f"{head}, {args.max_tokens} tokens max")
    print(f"{'#':>2} {'tokens':>6} {'ask tok/s':>9} {'api tok/s':>9} {'cost':>6}"
          f" {'client ttft':>11} {'engine ttft':>11} {'extra':>7} same")  # fmt: skip
    for n, (local, api) in enumerate(rows, 1):
        cost = 1 - api.tokens_per_s / local.tokens_per_s
        print(
            f"{n:>2} {api.tokens:>6} {local.tokens_per_s:>9.1f} {api.tokens_per_s:>9.1f}"
            f" {cost:>6.1%} {api.ttft_s * 1000:>9.0f}ms {api.engine_ttft_s * 1000:>9.0f}ms"
            f" {(api.ttft_s - api.engine_ttft_s) * 1000:>5.0f}ms {local.text == api.text}"
        )
    local_speed = mean(r[0].tokens_per_s for r in rows)
    api_speed = mean(r[1].tokens_per_s for r in rows)
    extra = [r[1].ttft_s - r[1].engine_ttft_s for r in rows]
    summary = {
        "model": lm.name,
        "engine": lm.engine,
        "method": args.method,
        "prompts": len(rows),
        "max_tokens": args.max_tokens,
        "ask_tokens_per_s": round(local_speed, 2),
        "api_tokens_per_s": round(api_speed, 2),
        "api_cost": round(1 - api_speed / local_speed, 4),
        "ttft_extra_ms_mean": round(mean(extra) * 1000, 1),
        "ttft_extra_ms_max": round(max(extra) * 1000, 1),
        "identical": sum(r[0].text == r[1].text for r in rows),
    }
    print(
        f"mean: ask {local_speed:.1f} tok/s, api {api_speed:.1f} tok/s, "
        f"cost {summary['api_cost']:.1%}; first token at the client "
        f"{summary['ttft_extra_ms_mean']:.0f} ms after the engine's "
        f"(max {summary['ttft_extra_ms_max']:.0f} ms); "
        f"{summary['identical']}/{len(rows)} replies identical"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
