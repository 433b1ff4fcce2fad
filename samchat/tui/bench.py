"""`samchat bench app`'s driver: the same questions through the real app, headless
(`App.run_test`), and through `samchat ask` in its own process, alternating, on the same model,
engine and method. Each reply's decoding speed is the engine's own figure, stored by each
front end as it stores every reply; the app's last live figures (what its stats bar showed
just before the reply ended) are kept beside them, to check that what it shows is what it does."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from samchat.chat.config import Config
from samchat.engines.engine_thread import ENGINE_THREAD
from samchat.errors import SamchatError
from samchat.models.loader import ModelSpec
from samchat.names import Method

REPLY_TIMEOUT_S = 600.0

Say = Callable[[str], None]


@dataclass(frozen=True)
class Run:
    """One question answered by one front end."""

    front: str  # "app" or "cli"
    method: Method
    round: int
    question: int
    tokens: int
    tokens_per_s: float  # the engine's figure (decoding, after the prompt is read)
    speedup_est: float
    mat: float
    wall_s: float  # from sending the question to the reply settled (app) / the process' end
    shown_tokens_per_s: float = 0.0  # the app's live figure when the reply ended (0: cli)
    shown_speedup: float = 0.0
    text_sha: str = ""


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _spec_args(spec: ModelSpec) -> list[str]:
    args = ["--engine", spec.engine, "--device", spec.device]
    if spec.dtype != "auto":
        args += ["--dtype", spec.dtype]
    if spec.source:
        args += ["--model", spec.source]
    return args


def ask_once(
    spec: ModelSpec, question: str, method: Method, max_new: int, data_dir: Path
) -> tuple[dict[str, object], float]:
    """`samchat ask --json` in its own process: its answer object and its wall time."""
    cmd = [
        sys.executable,
        "-m",
        "samchat",
        "ask",
        question,
        "--json",
        "--method",
        method,
        "--max-new-tokens",
        str(max_new),
        "--temperature",
        "0",
        "--data-dir",
        str(data_dir),
        *_spec_args(spec),
    ]
    t0 = time.perf_counter()
    # Started from the engine thread: the process gets its priority, not the UI thread's.
    done = ENGINE_THREAD.run(
        partial(subprocess.run, cmd, capture_output=True, text=True, timeout=REPLY_TIMEOUT_S)
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SamchatError(f"samchat ask failed ({done.returncode}): {last}")
    answer: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer, wall


def _cli_run(
    spec: ModelSpec, question: str, method: Method, max_new: int, data_dir: Path, rnd: int, q: int
) -> Run:
    answer, wall = ask_once(spec, question, method, max_new, data_dir)
    stats = answer["stats"]
    assert isinstance(stats, dict)
    return Run(
        "cli",
        method,
        rnd,
        q,
        int(stats["tokens"]),
        float(stats["tokens_per_s"]),
        float(stats["speedup_est"]),
        float(stats["mat"]),
        wall,
        text_sha=_sha(str(answer["text"])),
    )


async def _app_runs(
    spec: ModelSpec,
    questions: list[str],
    method: Method,
    max_new: int,
    work: Path,
    rnd: int,
    cache_dir: Path,
) -> list[Run]:
    """Each question in a new chat of the real app, which loads spec's model as it does at
    start-up (on the engine measured fastest here, where spec leaves it to auto); the caller
    has its UI thread give way to the engine as `samchat` does."""
    from samchat.tui.app import SamchatApp

    cfg = Config()
    cfg.decoding.method = method
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=max_new, temperature=0.0)
    app = SamchatApp(
        spec=spec,
        config=cfg,
        config_path=work / "app-config" / "config.toml",
        db_path=work / "app-data" / "samchat.db",
        cache_dir=cache_dir,
    )
    runs: list[Run] = []
    async with app.run_test(size=(120, 40)) as pilot:
        end = time.perf_counter() + REPLY_TIMEOUT_S
        while app.model_state != "ready":
            if app.model_state == "failed" or time.perf_counter() > end:
                raise SamchatError(f"the app could not load the model ({app.model_state})")
            await asyncio.sleep(0.05)
        for q, question in enumerate(questions):
            await app.chat.action_new_chat()
            await pilot.pause()
            done = app.chat.replies_finished
            app.chat.prompt.focus()
            app.chat.prompt.insert(question)
            t0 = time.perf_counter()
            await pilot.press("enter")
            end = t0 + REPLY_TIMEOUT_S
            while app.chat.replies_finished == done:
                if time.perf_counter() > end:
                    raise SamchatError(f"the app gave no reply in {REPLY_TIMEOUT_S:.0f} s")
                await asyncio.sleep(0.05)
            wall = time.perf_counter() - t0
            live = app.chat.conversation.replies.last_live
            view = app.chat.chat_view.views()[-1]
            if live is None or live.final is None:
                raise SamchatError("the app's reply ended without its figures")
            final = live.final
            runs.append(
                Run(
                    "app",
                    method,
                    rnd,
                    q,
                    final.tokens,
                    final.tokens_per_s,
                    final.speedup_est,
                    final.mat,
                    wall,
                    live.shown_at_end[0],
                    live.shown_at_end[1],
                    _sha(view.content),
                )
            )
        await pilot.press("ctrl+q")
    return runs


def run_bench(
    spec: ModelSpec,
    questions: list[str],
    methods: list[Method],
    max_new: int,
    rounds: int,
    cache_dir: Path,
    say: Say,
) -> list[Run]:
    """Alternates app and CLI: each round puts every question through both, the front end
    that goes first swapping each round. Each front end keeps its own history, so from the
    second round on both draft from the same earlier answers."""
    from samchat.tui.launch import give_way_to_engine

    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="samchat-bench-app-") as tmp:
        root = Path(tmp)
        for method in methods:
            work = root / method.replace("+", "_")
            cli_dir = work / "cli-data"
            for rnd in range(rounds):
                order = ("app", "cli") if rnd % 2 == 0 else ("cli", "app")
                for front in order:
                    say(f"{method}, round {rnd + 1}/{rounds}: {front}")
                    if front == "app":
                        with give_way_to_engine():
                            runs += asyncio.run(
                                _app_runs(spec, questions, method, max_new, work, rnd, cache_dir)
                            )
                    else:
                        for q, question in enumerate(questions):
                            runs.append(_cli_run(spec, question, method, max_new, cli_dir, rnd, q))
    return runs


def summary(runs: list[Run]) -> list[dict[str, object]]:
    """Per method: the mean tok/s of each front end over the same replies, their ratio, and
    how far the app's last live figures were from its final ones."""
    rows: list[dict[str, object]] = []
    for method in dict.fromkeys(r.method for r in runs):
        app = [r for r in runs if r.method == method and r.front == "app"]
        cli = [r for r in runs if r.method == method and r.front == "cli"]
        app_tps = sum(r.tokens_per_s for r in app) / len(app)
        cli_tps = sum(r.tokens_per_s for r in cli) / len(cli)
        # Medians too: on a shared machine one reply in a dozen can run at a fifth of the speed.
        app_med = statistics.median(r.tokens_per_s for r in app)
        cli_med = statistics.median(r.tokens_per_s for r in cli)
        live = [abs(r.shown_tokens_per_s / r.tokens_per_s - 1) for r in app if r.tokens_per_s]
        speed = [abs(r.shown_speedup / r.speedup_est - 1) for r in app if r.shown_speedup]
        same = sum(
            a.text_sha == c.text_sha
            for a in app
            for c in cli
            if (a.round, a.question) == (c.round, c.question)
        )
        rows.append(
            {
                "method": method,
                "replies": len(app),
                "cli_tok_s": round(cli_tps, 1),
                "app_tok_s": round(app_tps, 1),
                "app_over_cli": round(app_tps / cli_tps, 3) if cli_tps else 0.0,
                "cli_tok_s_median": round(cli_med, 1),
                "app_tok_s_median": round(app_med, 1),
                "app_over_cli_median": round(app_med / cli_med, 3) if cli_med else 0.0,
                "cli_mat": round(sum(r.mat for r in cli) / len(cli), 2),
                "app_mat": round(sum(r.mat for r in app) / len(app), 2),
                "live_tok_s_off_max": round(max(live, default=0.0), 3),
                "live_speedup_off_max": round(max(speed, default=0.0), 3),
                "identical_replies": f"{same}/{len(app)}",
            }
        )
    return rows


def write_json(
    path: Path, cpu: str, spec: ModelSpec, runs: list[Run], engine_why: str = ""
) -> None:
    data = {
        "cpu": cpu,
        "threads": os.cpu_count(),
        "engine": f"{spec.engine}/{spec.dtype}",
        "engine_why": engine_why,  # engine_choice.why: measured fastest, asked for, ...
        "summary": summary(runs),
        "runs": [asdict(r) for r in runs],
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
