"""What a user waits for, from process start: the first token and the whole answer of
`samchat ask`, beside llama-cpp-python's own `Llama` on the same GGUF and the same prompt, in one
run on one machine. Each is a fresh process timed from its start to its first byte on stdout
(the first token) and to its exit (the whole answer)."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

QUESTION = "Using only the text above, say in two sentences what samchat is for."
SHORT = "Say hi"
SAMCHAT = "samchat ask"
PEER = "llama-cpp-python Llama"
WARM, FIRST_USE = "warm", "first use"

# llama-cpp-python's high-level API as a user would call it, with samchat's context size and
# thread count (its default n_ctx of 512 holds no document, and it uses half the cores).
PEER_SCRIPT = """
import sys
from llama_cpp import Llama
gguf, n_ctx, threads, max_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prompt = sys.stdin.read()
llm = Llama(model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False)
stream = llm.create_chat_completion(
    [{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.0, stream=True
)
for chunk in stream:
    piece = chunk["choices"][0]["delta"].get("content")
    if piece:
        sys.stdout.write(piece)
        sys.stdout.flush()
"""


@dataclass(frozen=True)
class Case:
    name: str
    prompt: str
    tokens: int  # the prompt's tokens before the chat template


@dataclass(frozen=True)
class Timing:
    case: str
    tool: str
    start: str  # WARM, or FIRST_USE: a new cache (samchat times the machine once)
    first_s: float  # process start to the first byte of the answer
    total_s: float  # process start to the answer's last byte
    runs: int

    def to_dict(self) -> dict[str, str | float]:  # runs is an int
        return asdict(self)


def _document(tokenize: Callable[[str], list[int]]) -> str:
    """samchat's own documentation, long enough for the largest case."""
    from importlib.resources import files

    pack = files("samchat") / "corpora" / "samchat-docs"
    texts = [
        (pack / name).read_text(encoding="utf-8")
        for name in ("README.md", "ARCHITECTURE.md")
        if (pack / name).is_file()
    ]
    text = "\n\n".join(texts)
    if not text:  # a source checkout before setup.py copied them: the same files at the root
        root = Path(__file__).resolve().parents[2]
        text = "\n\n".join(
            p.read_text(encoding="utf-8")
            for p in (root / "README.md", root / "docs" / "ARCHITECTURE.md")
        )
    while len(tokenize(text)) < 8192:
        text += "\n\n" + text
    return text


def cases(gguf: Path, doc_tokens: tuple[int, ...]) -> list[Case]:
    """A short question, and one question after each document length (tokens of this GGUF's
    vocabulary, the document cut on a token boundary)."""
    from samchat.engines.llamacpp.model import llama

    vocab = llama().Llama(model_path=str(gguf), vocab_only=True, verbose=False)  # its log quiet

    def tokenize(text: str) -> list[int]:
        return list(vocab.tokenize(text.encode(), add_bos=False, special=False))

    def detokenize(ids: list[int]) -> str:
        return str(vocab.detokenize(ids).decode("utf-8", errors="ignore"))

    out = [Case("short", SHORT, len(tokenize(SHORT)))]
    if doc_tokens:
        ids = tokenize(_document(tokenize))
        for n in doc_tokens:
            prompt = detokenize(ids[:n]) + "\n\n" + QUESTION
            out.append(Case(f"document {n / 1000:g}k", prompt, len(tokenize(prompt))))
    return out


def time_process(cmd: list[str], stdin: str, env: dict[str, str]) -> tuple[float, float, str]:
    """(seconds to the first byte on stdout, seconds to the last one, stdout) of one fresh
    process, from its start: the first token and the whole answer, whatever the process does
    after it (on first use, `samchat ask` times the machine before it exits)."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(stdin.encode())
        proc.stdin.close()
        chunks: list[bytes] = []
        first_s = last_s = 0.0
        while chunk := os.read(proc.stdout.fileno(), 65536):
            last_s = time.perf_counter() - started
            first_s = first_s or last_s
            chunks.append(chunk)
        proc.wait()
        if proc.returncode != 0 or not chunks:
            err.seek(0)
            last = (err.read().decode(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"{' '.join(cmd[1:3])} exited {proc.returncode}: {last}")
    return first_s, last_s, b"".join(chunks).decode(errors="replace")


@contextmanager
def homes() -> Iterator[Path]:
    """A new samchat home (data, config, and on first use the cache), removed afterwards."""
    home = Path(tempfile.mkdtemp(prefix="samchat-latency-"))
    try:
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def samchat_env(home: Path, first_use: bool) -> dict[str, str]:
    """A samchat with its data and config under `home` (nothing of the user's is read or
    written). Warm: the user's own cache (what this machine has measured and converted); first
    use: a new one under `home` (the bundled model's tokenizer still comes converted beside its
    file, as `make setup` leaves it for a new user; another GGUF's is converted)."""
    env = dict(os.environ)
    names = ("DATA", "CONFIG", "CACHE") if first_use else ("DATA", "CONFIG")
    for name in names:
        env[f"SAMCHAT_{name}_DIR"] = str(home / name.lower())
    if first_use:
        env["SAMCHAT_MODEL_CACHE"] = str(home / "cache" / "models")
    return env


def samchat_cmd(gguf: Path, max_new_tokens: int) -> list[str]:
    return [
        sys.executable, "-m", "samchat", "--model", str(gguf), "ask", "-",
        "--no-save", "--temperature", "0", "--max-new-tokens", str(max_new_tokens),
    ]  # fmt: skip


def peer_cmd(gguf: Path, n_ctx: int, threads: int, max_new_tokens: int) -> list[str]:
    return [
        sys.executable, "-c", PEER_SCRIPT, str(gguf), str(n_ctx), str(threads), str(max_new_tokens),
    ]  # fmt: skip


def run(
    gguf: Path,
    *,
    doc_tokens: tuple[int, ...] = (1500, 4000),
    repeat: int = 3,
    max_new_tokens: int = 64,
    first_use: bool = True,
    n_ctx: int = 8192,
    threads: int = 1,
    progress: Callable[[str], None] = lambda _: None,
) -> list[Timing]:
    """Each case: samchat and the peer alternately, `repeat` times warm (the median kept; the
    user's cache, set up by a first run if it is not); with `first_use`, samchat once more from
    a new cache (the peer has nothing to set up)."""
    out: list[Timing] = []
    with homes() as warm_home:
        env = samchat_env(warm_home, first_use=False)
        progress("one run first, so that the warm runs find the model set up in the cache")
        time_process(samchat_cmd(gguf, 2), SHORT, env)
        for case in cases(gguf, doc_tokens):
            samples: dict[str, list[tuple[float, float]]] = {SAMCHAT: [], PEER: []}
            for i in range(repeat):
                progress(f"{case.name}: run {i + 1} of {repeat}")
                first, total, _ = time_process(samchat_cmd(gguf, max_new_tokens), case.prompt, env)
                samples[SAMCHAT].append((first, total))
                first, total, _ = time_process(
                    peer_cmd(gguf, n_ctx, threads, max_new_tokens), case.prompt, dict(os.environ)
                )
                samples[PEER].append((first, total))
            for tool, runs in samples.items():
                out.append(
                    Timing(
                        case.name,
                        tool,
                        WARM,
                        statistics.median(r[0] for r in runs),
                        statistics.median(r[1] for r in runs),
                        len(runs),
                    )
                )
            if first_use:
                progress(f"{case.name}: samchat from a new cache")
                with homes() as new_home:
                    first, total, _ = time_process(
                        samchat_cmd(gguf, max_new_tokens),
                        case.prompt,
                        samchat_env(new_home, first_use=True),
                    )
                out.append(Timing(case.name, SAMCHAT, FIRST_USE, first, total, 1))
    return out


def table(timings: list[Timing], tokens: dict[str, int]) -> str:
    """Markdown: one row per case and start; a warm row has the peer beside it, and the ratio
    of the first-token times (samchat / peer: below 1 is sooner)."""
    peer = {t.case: t for t in timings if t.tool == PEER and t.start == WARM}
    lines = [
        "| prompt | prompt tokens | start | samchat: first token | answer | "
        "llama-cpp-python: first token | answer | first token, samchat / peer |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in timings:
        if t.tool != SAMCHAT:
            continue
        p = peer.get(t.case) if t.start == WARM else None
        beside = (
            f"{p.first_s:.2f} s | {p.total_s:.2f} s | {t.first_s / p.first_s:.2f}x"
            if p
            else "– | – | –"
        )
        lines.append(
            f"| {t.case} | {tokens.get(t.case, 0)} | {t.start} | {t.first_s:.2f} s | "
            f"{t.total_s:.2f} s | {beside} |"
        )
    return "\n".join(lines)
