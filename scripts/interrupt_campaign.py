"""The interruption campaign: Ctrl-C (SIGINT) after random delays into real `samchat` processes,
and Esc or ctrl+q at random points in the app through Pilot, with the real default model.

Front ends:
- ask:    a local `samchat ask` (loading, reading a long prompt, decoding, the first-use timing);
- remote: `samchat ask` against an OpenAI-like server that streams a few words, then stalls;
- serve:  `samchat serve --save` with one or two streaming clients;
- app:    the Textual app: Esc (stop the reply, or the timing) or ctrl+q (quit).

After each trial: the process ended (the app's reply stopped, or the app quit) within LIMIT_S
of the interrupt; the store passes `samchat db check`; every message saved before the trial is
still there, unchanged; and every reply saved is whole (a finish reason and readable figures).

    python scripts/interrupt_campaign.py --trials 50 --markdown [--json OUT]

`make faults` runs it beside the other campaigns; tests/project/test_interrupt_campaign.py runs
a short form.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 2.0  # every interrupt must be obeyed within this
FRONTS = ("ask", "remote", "serve", "app")
QUESTION = "Write a long story about a lighthouse keeper and the sea."
Rows = dict[int, tuple[str, str, str | None]]  # message id: role, content, finish reason


@dataclass
class Trial:
    front: str
    delay_s: float  # from the start (the process's, or the question's in the app) to the interrupt
    what: str  # the interrupt: sigint, esc or quit
    case: str  # what the front end was doing: with --file, one or two clients, ...
    stop_s: float | None = None  # from the interrupt to the end; None: it never ended
    rc: int | None = None
    forced: bool = False  # the watchdog ended it (samchat.interrupts), not the clean path
    before: bool = False  # it had finished before the interrupt came (not counted)
    problems: list[str] = field(default_factory=list)


@dataclass
class Figures:
    front: str
    trials: int = 0
    counted: int = 0  # interrupted while still working
    within: int = 0  # ended within LIMIT_S
    forced: int = 0
    cases: dict[str, int] = field(default_factory=dict)  # trials per case
    median_s: float = 0.0
    max_s: float = 0.0
    kept: int = 0  # messages saved before the trials, all checked after each one
    lost: int = 0
    problems: list[str] = field(default_factory=list)


# -- the store ----------------------------------------------------------------------------------


def rows(db: Path) -> Rows:
    if not db.exists():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        found = conn.execute("SELECT id, role, content, finish_reason FROM messages").fetchall()
    return {int(mid): (role, content, reason) for mid, role, content, reason in found}


def check_store(data: Path, before: Rows, trial: Trial) -> int:
    """Problems go into the trial; returns how many earlier messages were lost or changed."""
    db = data / "samchat.db"
    if not db.exists():
        return 0
    check = subprocess.run(
        [sys.executable, "-m", "samchat", "db", "check", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        env=_env(data.parent),
    )
    if check.returncode != 0:
        trial.problems.append(f"db check: {check.stderr.strip() or check.stdout.strip()}")
    after = rows(db)
    lost = sum(1 for mid, row in before.items() if after.get(mid) != row)
    if lost:
        trial.problems.append(f"{lost} earlier message(s) lost or changed")
    for mid, (role, content, reason) in after.items():
        if mid in before or role != "assistant":
            continue
        if reason is None:
            trial.problems.append(f"reply {mid} saved without a finish reason")
        elif reason == "cancelled" and not isinstance(content, str):
            trial.problems.append(f"reply {mid} is not text")
    return lost


def seed_store(data: Path) -> None:
    """One earlier chat, whose messages every trial must leave alone."""
    sys.path.insert(0, str(ROOT))
    from samchat.store import Store

    data.mkdir(parents=True, exist_ok=True)
    with Store.open(data / "samchat.db") as store:
        chat = store.create_chat("kept", "m")
        q = store.add_message(chat, "user", "an earlier question", None)
        store.add_message(chat, "assistant", "an earlier answer", q, finish_reason="stop")


# -- processes ------------------------------------------------------------------------------------


def _env(home: Path, cache: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        SAMCHAT_CONFIG_DIR=str(home / "config"),
        SAMCHAT_CACHE_DIR=str(cache or home / "cache"),
        PYTHONUNBUFFERED="1",
    )
    env.pop("SAMCHAT_DEBUG", None)
    return env


def as_from_a_terminal() -> None:
    """SIGINT as a terminal's foreground process gets it: a campaign started in the background
    ignores it, and its children would inherit that (Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def interrupt_process(
    argv: list[str], env: dict[str, str], delay: float, trial: Trial, ready: str | None = None
) -> tuple[str, str]:
    """Start `argv`, SIGINT it `delay` s after it started (after `ready` appears on stderr,
    if given), and time how long it takes to end. Returns (stdout, stderr)."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        preexec_fn=as_from_a_terminal,
    )
    err: list[str] = []
    seen = threading.Event()

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err.append(line)
            if ready is not None and ready in line:
                seen.set()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    if ready is not None and not seen.wait(120):
        trial.problems.append(f"never printed {ready!r}")
    time.sleep(delay)
    if proc.poll() is not None:
        trial.before = True
    else:
        sigint_and_time(proc, trial)
    out = proc.stdout.read() if proc.stdout is not None else ""
    reader.join(5)
    text = "".join(err)
    judge(proc, text, trial)
    return out, text


def sigint_and_time(proc: subprocess.Popen[str], trial: Trial) -> None:
    """Ctrl-C `proc` and time how long it takes to end (30 s at most, then it is killed)."""
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
        trial.stop_s = time.monotonic() - t0
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def judge(proc: subprocess.Popen[str], stderr: str, trial: Trial) -> None:
    """What the ended process said: the watchdog's exit, a traceback, a bad exit status."""
    trial.rc = proc.returncode
    trial.forced = "stopped without waiting" in stderr
    if "Traceback" in stderr:
        trial.problems.append("a traceback: " + stderr.split("Traceback")[1][-300:])
    if not trial.before and trial.rc not in (130, 0):
        trial.problems.append(f"exit status {trial.rc}")


def ask_trial(home: Path, rng: random.Random, n: int) -> Trial:
    """A local ask with a fresh cache (so the first-use timing follows the answer); a third
    of them, the second trial first, read a long attached file first."""
    data = home / "data"
    with_file = n % 3 == 1
    trial = Trial("ask", rng.uniform(0.0, 5.0), "sigint", "--file" if with_file else "question")
    argv = [sys.executable, "-m", "samchat", "ask", "--data-dir", str(data)]
    argv += ["--max-new-tokens", "64", f"{QUESTION} ({n})"]
    if with_file:
        argv += ["--file", str(ROOT / "LICENSE")]
    before = rows(data / "samchat.db")
    interrupt_process(argv, _env(home, home / f"cache-{n}"), trial.delay_s, trial)
    check_store(data, before, trial)
    return trial


class _Stalling(BaseHTTPRequestHandler):
    """An OpenAI-like server: one model; a chat completion streams a few words, then stalls."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "m", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for word in ("Once", " upon", " a", " time"):
                chunk = {
                    "id": "c",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
                }
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.2)
            self.server.stop.wait(60)  # type: ignore[attr-defined]
        except OSError:  # the client left
            pass


@contextlib.contextmanager
def stalling_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stalling)
    server.daemon_threads = True
    server.stop = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.stop.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()


def remote_trial(home: Path, rng: random.Random, n: int, url: str) -> Trial:
    data = home / "data"
    trial = Trial("remote", rng.uniform(0.0, 2.5), "sigint", "stalled stream")
    argv = [sys.executable, "-m", "samchat", "--model", f"openai:{url}", "ask"]
    argv += ["--data-dir", str(data), f"{QUESTION} ({n})"]
    before = rows(data / "samchat.db")
    interrupt_process(argv, _env(home), trial.delay_s, trial)
    check_store(data, before, trial)
    return trial


def serve_trial(home: Path, rng: random.Random, n: int) -> Trial:
    """`samchat serve --save`, one or two clients streaming long replies, then Ctrl-C."""
    data = home / "data"
    clients_n = 1 + n % 2
    trial = Trial("serve", rng.uniform(0.0, 3.0), "sigint", ("one client", "two clients")[n % 2])
    argv = [sys.executable, "-m", "samchat", "serve", "--port", "0", "--save"]
    argv += ["--data-dir", str(data)]
    before = rows(data / "samchat.db")
    clients: list[threading.Thread] = []
    env = _env(home)
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        preexec_fn=as_from_a_terminal,
    )
    assert proc.stderr is not None
    url = ""
    for line in proc.stderr:
        if "[serving" in line:
            url = line.split(" at ")[1].split(";")[0]
            break
    if not url:
        proc.kill()
        proc.wait()
        trial.problems.append("serve never listened")
        return trial
    tail: list[str] = []
    drain = threading.Thread(target=lambda: tail.extend(proc.stderr or ()), daemon=True)
    drain.start()

    def client(k: int) -> None:
        from openai import OpenAI

        api = OpenAI(base_url=url, api_key="none", max_retries=0, timeout=30)
        with contextlib.suppress(Exception):  # the server going away mid-stream is the point
            for _ in api.chat.completions.create(
                model="samchat",
                messages=[{"role": "user", "content": f"{QUESTION} ({n}.{k})"}],
                max_tokens=400,
                stream=True,
            ):
                pass

    for k in range(clients_n):
        clients.append(threading.Thread(target=client, args=(k,), daemon=True))
        clients[-1].start()
    time.sleep(trial.delay_s)
    sigint_and_time(proc, trial)
    drain.join(5)
    judge(proc, "".join(tail), trial)
    for c in clients:
        c.join(10)
    check_store(data, before, trial)
    return trial


# -- the app --------------------------------------------------------------------------------------


async def _app_trial(home: Path, rng: random.Random, n: int, trial: Trial) -> None:
    sys.path.insert(0, str(ROOT))
    from samchat.tui.app import SamchatApp

    app = SamchatApp(db_path=home / "data" / "samchat.db", config_path=home / "config.toml")
    quit_at: float | None = None
    async with app.run_test(size=(120, 36)) as pilot:
        conversation = app.chat.conversation
        app.chat.prompt.focus()
        app.chat.prompt.insert(f"{QUESTION} ({n})")
        await pilot.press("enter")
        t_sent = time.monotonic()
        while time.monotonic() - t_sent < trial.delay_s:
            await pilot.pause(0.02)
        if trial.what == "quit":
            quit_at = time.monotonic()
            await pilot.press("ctrl+q")
        else:

            def idle() -> bool:
                return (
                    conversation.replies.job is None
                    and conversation.replies.pending is None
                    and not (conversation.replies.timing)
                )

            if idle() and app.chat.replies_finished:
                trial.before = True
            t0 = time.monotonic()
            await pilot.press("escape")
            while not idle() and time.monotonic() - t0 < 30:
                await pilot.pause(0.01)
            if idle():
                trial.stop_s = time.monotonic() - t0
            quit_at = time.monotonic()
            await pilot.press("ctrl+q")
    # The app is closed. `samchat` then exits at once (samchat.interrupts.exit_promptly): a
    # worker thread still in a C call is not waited for, so the quit ends here.
    if trial.what == "quit":
        trial.stop_s = time.monotonic() - quit_at


def app_trial(home: Path, rng: random.Random, n: int) -> Trial:
    data = home / "data"
    # A third quit (ctrl+q), the second trial first; the rest stop the reply (Esc).
    quit_ = n % 3 == 1
    trial = Trial(
        "app", rng.uniform(0.0, 4.0), "quit" if quit_ else "esc", "ctrl+q" if quit_ else "esc"
    )
    saved = dict(os.environ)
    os.environ.update(_env(home, home / f"cache-{n}"))
    before = rows(data / "samchat.db")
    try:
        asyncio.run(_app_trial(home, rng, n, trial))
    except Exception as exc:
        trial.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    check_store(data, before, trial)
    return trial


# -- the campaign ---------------------------------------------------------------------------------


def summarize(front: str, trials: list[Trial], kept: int) -> Figures:
    fig = Figures(front, trials=len(trials), kept=kept)
    counted = [t for t in trials if not t.before]
    fig.counted = len(counted)
    times = [t.stop_s for t in counted if t.stop_s is not None]
    fig.within = sum(1 for s in times if s <= LIMIT_S)
    fig.forced = sum(1 for t in counted if t.forced)
    for t in trials:
        fig.cases[t.case] = fig.cases.get(t.case, 0) + 1
    fig.median_s = round(statistics.median(times), 3) if times else 0.0
    fig.max_s = round(max(times), 3) if times else 0.0
    for t in trials:
        if t.stop_s is None and not t.before:
            t.problems.append("did not end within 30 s")
        elif t.stop_s is not None and t.stop_s > LIMIT_S:
            t.problems.append(f"ended {t.stop_s:.2f} s after the interrupt")
        fig.problems += [f"{t.what} after {t.delay_s:.2f} s: {p}" for p in t.problems]
        fig.lost += sum(1 for p in t.problems if "lost" in p)
    return fig


def campaign(
    trials: int, fronts: tuple[str, ...], seed: int, work: Path, say: Callable[[str], None]
) -> list[Figures]:
    rng = random.Random(seed)
    figures: list[Figures] = []
    for front in fronts:
        home = work / front
        seed_data = home / "data"
        seed_store(seed_data)
        kept = len(rows(seed_data / "samchat.db"))
        done: list[Trial] = []
        with contextlib.ExitStack() as stack:
            url = stack.enter_context(stalling_server()) if front == "remote" else ""
            for n in range(trials):
                if front == "ask":
                    trial = ask_trial(home, rng, n)
                elif front == "remote":
                    trial = remote_trial(home, rng, n, url)
                elif front == "serve":
                    trial = serve_trial(home, rng, n)
                else:
                    trial = app_trial(home, rng, n)
                done.append(trial)
                shown = "finished first" if trial.before else f"{trial.stop_s}"
                say(f"{front} {n + 1}/{trials}: {trial.what} at {trial.delay_s:.2f} s -> {shown}")
        figures.append(summarize(front, done, kept))
    return figures


def markdown(figures: list[Figures]) -> str:
    lines = [
        f"| front end | trials | interrupted while working | ended within {LIMIT_S:.0f} s "
        "| forced by the watchdog | median s | max s | earlier messages lost | problems |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for f in figures:
        lines.append(
            f"| {f.front} | {f.trials} | {f.counted} | {f.within} | {f.forced} | "
            f"{f.median_s:.2f} | {f.max_s:.2f} | {f.lost} | {len(f.problems)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trials", type=int, default=50, help="interrupts per front end")
    p.add_argument(
        "--fronts", default=",".join(FRONTS), help="comma-separated: " + ", ".join(FRONTS)
    )
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--markdown", action="store_true", help="print the figures as a table")
    args = p.parse_args(argv)
    fronts = tuple(f for f in args.fronts.split(",") if f)
    unknown = sorted(set(fronts) - set(FRONTS))
    if unknown:
        p.error(f"unknown front end(s) {', '.join(unknown)}; choose from {', '.join(FRONTS)}")
    with tempfile.TemporaryDirectory(prefix="samchat-interrupts-") as work:
        figures = campaign(
            args.trials, fronts, args.seed, Path(work), lambda s: print(s, file=sys.stderr)
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(f) for f in figures], indent=2) + "\n")
    if args.markdown:
        print(markdown(figures))
    for f in figures:
        for problem in f.problems:
            print(f"{f.front}: {problem}", file=sys.stderr)
    return 1 if any(f.problems for f in figures) else 0


if __name__ == "__main__":
    sys.exit(main())
