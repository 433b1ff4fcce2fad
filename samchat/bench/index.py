"""Measurements behind `samchat bench index`: build speed, size, match/draft cost, load time.

The corpus is real text: the Python standard library's sources, tokenized with the default
model's tokenizer (cached after the first run), or split into words when the tokenizer cannot be
loaded. Queries are held-out files, so matches are as partial as in real use.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import pickle
import re
import shutil
import sysconfig
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from samchat.bench.dict_baseline import DictAutomaton, DictCursor
from samchat.errors import SamchatError
from samchat.sam import backend, impl, load_pure
from samchat.sam.index import StaticIndex

if TYPE_CHECKING:
    from samchat.sam import MatchCursor, MultiCursor, SuffixAutomaton

DRAFT_N = 16
TREE = (32, 6, 4)  # max_nodes, max_depth, topk
QUERY_TOKENS = 20_000

Say = Callable[[str], None]
# The JSON report: figures, and what produced them (the backend, the corpus kind, the tree
# shape; `samchat bench index` adds the machine, the date and the command).
Report = dict[str, float | str | list[int]]


@dataclass
class Corpus:
    kind: str  # "tokenizer" or "words"
    fingerprint: str
    separator: int
    docs: list[list[int]]  # indexed documents
    queries: list[int]  # held-out text, fed token by token

    @property
    def n_tokens(self) -> int:
        return sum(len(d) + 1 for d in self.docs)


def _source_texts() -> Iterator[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        if "test" in path.parts or "tests" in path.parts:
            continue
        with contextlib.suppress(OSError, UnicodeDecodeError):
            yield path.read_text(encoding="utf-8")


def _word_encoder() -> tuple[Callable[[str], list[int]], str, int]:
    vocab: dict[str, int] = {}
    pattern = re.compile(r"\w+|[^\w\s]")

    def encode(text: str) -> list[int]:
        return [vocab.setdefault(w, len(vocab) + 1) for w in pattern.findall(text)]

    return encode, "words", 0


def _tokenizer_encoder() -> tuple[Callable[[str], list[int]], str, int]:
    from samchat.models.loader import load_tokenizer

    tok, fingerprint = load_tokenizer()
    eos = tok.eos_token_id
    separator = int(eos) if isinstance(eos, int) else 0

    def encode(text: str) -> list[int]:
        ids: list[int] = tok.encode(text, add_special_tokens=False)
        return [t for t in ids if t != separator]

    return encode, fingerprint, separator


@dataclass
class Source:
    kind: str
    fingerprint: str
    separator: int
    flat: array.array[int]
    doc_lens: list[int]


def load_source(want: int, kind: str, say: Say, cache_dir: Path | None) -> Source:
    """At least `want` tokens of Python sources, tokenized once into cache_dir (None: every
    run tokenizes them again)."""
    cache = cache_dir / f"corpus-{kind}.i32" if cache_dir is not None else None
    meta_path = cache.with_suffix(".json") if cache is not None else None
    if cache is not None and meta_path is not None and cache.exists() and meta_path.exists():
        with contextlib.suppress(ValueError, KeyError, OSError):
            meta = json.loads(meta_path.read_text())
            flat = array.array("i")
            flat.frombytes(cache.read_bytes())
            if len(flat) >= want and sum(meta["doc_lens"]) == len(flat):
                return Source(kind, meta["fingerprint"], meta["separator"], flat, meta["doc_lens"])
    encode: Callable[[str], list[int]]
    if kind == "tokenizer":
        try:
            encode, fingerprint, separator = _tokenizer_encoder()
        except Exception as exc:
            say(f"tokenizer unavailable ({type(exc).__name__}); using words")
            return load_source(want, "words", say, cache_dir)
    else:
        encode, fingerprint, separator = _word_encoder()
    say(
        f"tokenizing Python sources ({kind}) for {want:,} tokens"
        + (" (cached afterwards)" if cache_dir else "")
    )
    flat, doc_lens = array.array("i"), []
    for text in _source_texts():
        ids = encode(text)
        if ids:
            flat.extend(ids)
            doc_lens.append(len(ids))
        if len(flat) >= want:
            break
    if cache is not None and meta_path is not None:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_bytes(flat.tobytes())
        meta_path.write_text(
            json.dumps({"fingerprint": fingerprint, "separator": separator, "doc_lens": doc_lens})
        )
    return Source(kind, fingerprint, separator, flat, doc_lens)


HOLD_OUT_EVERY = 25  # every 25th file is held out: its start becomes query text


def make_corpus(src: Source, tokens: int) -> Corpus:
    """Files up to `tokens` (the last one cut) as documents, except every HOLD_OUT_EVERY-th
    file, whose first tokens form the queries: held-out text spread over the whole corpus,
    so that no single odd file (a table of codes, say) decides the timings."""
    docs: list[list[int]] = []
    queries: list[int] = []
    per_file = QUERY_TOKENS // 20
    pos = used = 0
    for i, n in enumerate(src.doc_lens):
        if used >= tokens and len(queries) >= QUERY_TOKENS:
            break
        if i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1:
            if len(queries) < QUERY_TOKENS:
                queries += src.flat[pos : pos + min(n, per_file)].tolist()
        elif used < tokens:
            take = min(n, tokens - used - 1)
            if take > 0:
                docs.append(src.flat[pos : pos + take].tolist())
                used += take + 1
        pos += n
    if not queries:
        raise SamchatError("the benchmark corpus has too few files for held-out queries")
    return Corpus(src.kind, src.fingerprint, src.separator, docs, queries)


def _joined(docs: list[list[int]], separator: int) -> list[int]:
    out: list[int] = []
    for d in docs:
        out.extend(d)
        out.append(separator)
    return out


def _best(fn: Callable[[], float], repeats: int) -> float:
    return min(fn() for _ in range(repeats))


def measure_build(
    mod: ModuleType, text: list[int], repeats: int
) -> tuple[dict[str, float], SuffixAutomaton]:
    """Tokens/s for extend + freeze (wall clock, and CPU time of this process, which a busy
    shared machine disturbs less), bytes/token while growing; and the frozen automaton."""
    best: dict[str, float] = {}
    best_sam = None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        sam = mod.SuffixAutomaton(len(text))
        for t in text:
            sam.extend(t)
        growing = sam.nbytes()
        t1 = time.perf_counter()
        sam.freeze()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if not best or wall < best["wall"]:
            best = {"wall": wall, "cpu": cpu, "extend": t1 - t0, "growing": growing}
            best_sam = sam
    assert best_sam is not None  # repeats >= 1
    n = len(text)
    figures = {
        "build_tokens_per_s": n / best["wall"],
        "build_cpu_tokens_per_s": n / best["cpu"],
        "extend_tokens_per_s": n / best["extend"],
        "bytes_per_token_building": best["growing"] / n,
    }
    return figures, best_sam


def measure_cursor(
    cursor: MatchCursor | MultiCursor, queries: list[int], repeats: int = 2
) -> dict[str, float]:
    """Best of `repeats` runs of _measure_cursor."""
    runs = [_measure_cursor(cursor, queries) for _ in range(repeats)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


def _measure_cursor(cursor: MatchCursor | MultiCursor, queries: list[int]) -> dict[str, float]:
    """µs per feed over the query stream; µs per sequence and tree draft, timed alone on
    copies of the cursor taken wherever it had a match."""
    cursor.reset()
    t0 = time.perf_counter()
    for t in queries:
        cursor.feed(t)
    feed_s = time.perf_counter() - t0
    cursor.reset()
    snaps = []
    for i, t in enumerate(queries):
        cursor.feed(t)
        if i % 4 == 0 and cursor.match_len:
            snaps.append(cursor.copy())
    t0 = time.perf_counter()
    for c in snaps:
        c.draft(DRAFT_N)
    draft_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for c in snaps:
        c.draft_tree(*TREE)
    tree_s = time.perf_counter() - t0
    n, m = len(queries), max(len(snaps), 1)
    return {
        "match_us": feed_s / n * 1e6,
        "draft_us": draft_s / m * 1e6,
        "tree_draft_us": tree_s / m * 1e6,
        "matched_fraction": 4 * len(snaps) / n,
    }


def measure_baseline(text: list[int], queries: list[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    t0 = time.perf_counter()
    sam = DictAutomaton()
    for t in text:
        sam.extend(t)
    out["baseline_build_tokens_per_s"] = len(text) / (time.perf_counter() - t0)
    # Memory of a smaller build, traced (tracing slows it down, so not timed).
    sub = text[: min(len(text), 100_000)]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    small = DictAutomaton()
    for t in sub:
        small.extend(t)
    out["baseline_bytes_per_token_memory"] = (tracemalloc.get_traced_memory()[0] - before) / len(
        sub
    )
    tracemalloc.stop()
    del small
    blob = pickle.dumps((sam.text, sam.link, sam.length, sam.minend, sam.next), protocol=5)
    out["baseline_bytes_per_token_disk"] = len(blob) / len(text)
    t0 = time.perf_counter()
    pickle.loads(blob)
    out["baseline_load_s_10m"] = (time.perf_counter() - t0) * 10_000_000 / len(text)
    cur = DictCursor(sam)
    t0 = time.perf_counter()
    for t in queries:
        cur.feed(t)
    feed_s = time.perf_counter() - t0
    cur = DictCursor(sam)
    snaps = []
    for i, t in enumerate(queries):
        cur.feed(t)
        if i % 4 == 0 and cur.match_len:
            twin = DictCursor(sam)
            twin.state, twin.match_len = cur.state, cur.match_len
            snaps.append(twin)
    t0 = time.perf_counter()
    for c in snaps:
        c.draft(DRAFT_N)
    draft_s = time.perf_counter() - t0
    out["baseline_match_us"] = feed_s / len(queries) * 1e6
    out["baseline_draft_us"] = draft_s / max(len(snaps), 1) * 1e6
    out["baseline_tokens"] = len(text)
    return out


def measure_load(directory: Path, corpus: Corpus, repeats: int) -> float:
    def once() -> float:
        t0 = time.perf_counter()
        index = StaticIndex.open(directory, corpus.fingerprint, corpus.separator)
        cur = index.cursor()
        cur.feed(corpus.queries[0])
        dt = time.perf_counter() - t0
        del cur
        index.close()
        return dt

    return _best(once, repeats)


def build_index(directory: Path, corpus: Corpus, docs: list[list[int]]) -> StaticIndex:
    index = StaticIndex.recreate(directory, corpus.fingerprint, corpus.separator)
    for i, d in enumerate(docs):
        index.add_document(f"doc{i}", d)
    index.flush()
    return index


def run_bench(
    tokens: int,
    load_tokens: int,
    baseline_tokens: int,
    pure_tokens: int,
    kind: str,
    say: Say,
    workdir: Path | None = None,
    cache_dir: Path | None = None,
) -> Report:
    """cache_dir: where the tokenized corpus is kept between runs."""
    # Held-out files are about 1/HOLD_OUT_EVERY of the text: read that much more.
    want = max(tokens, load_tokens) * (HOLD_OUT_EVERY + 2) // HOLD_OUT_EVERY + 2 * QUERY_TOKENS
    src = load_source(max(want, 300_000), kind, say, cache_dir)
    corpus = make_corpus(src, load_tokens)
    big_docs = corpus.docs
    small = make_corpus(src, tokens)
    text = _joined(small.docs, corpus.separator)
    res: Report = {
        "backend": backend(),
        "corpus": corpus.kind,
        "tokens": len(text),
        "draft_n": DRAFT_N,
        "tree": list(TREE),
        "loadavg_1m": os.getloadavg()[0],
    }
    say(f"build: {len(text):,} tokens ({backend()})")
    built, sam = measure_build(impl, text, repeats=2)
    res.update(built)
    res["bytes_per_token_frozen"] = sam.nbytes() / len(text)
    res["states_per_token"] = sam.n_states / len(text)
    mem = measure_cursor(impl.MatchCursor(sam, corpus.separator), small.queries)
    res.update({f"{k}_inmemory": v for k, v in mem.items() if k != "matched_fraction"})
    del sam
    tmp = Path(tempfile.mkdtemp(prefix="samchat-bench-", dir=workdir))
    try:
        say("write + memory-map the index")
        index = build_index(tmp / "small", small, small.docs)
        stats = index.stats()
        res["bytes_per_token_disk"] = stats["bytes"] / stats["tokens"]
        index.close()
        index = StaticIndex.open(tmp / "small", small.fingerprint, small.separator)
        # Straight from the memory map (nothing copied into the heap) ...
        mapped = measure_cursor(index.cursor(), small.queries)
        res.update({f"{k}_mapped": v for k, v in mapped.items() if k != "matched_fraction"})
        # ... and after warm(), which the app runs in the background after opening.
        index.warm()
        res.update(measure_cursor(index.cursor(), small.queries))
        res["bytes_per_token_memory"] = (
            sum(s.sam.nbytes() for s in index.segments) / stats["tokens"]
        )
        index.close()
        if load_tokens:
            say(f"load: building a {load_tokens:,}-token index")
            big = build_index(tmp / "big", corpus, big_docs)
            big_tokens = big.stats()["tokens"]
            res["load_tokens"] = big_tokens
            res["load_bytes"] = big.stats()["bytes"]
            big.close()
            scale = 10_000_000 / big_tokens
            res["load_s_10m"] = measure_load(tmp / "big", corpus, repeats=3) * scale
            big = StaticIndex.open(tmp / "big", corpus.fingerprint, corpus.separator)
            t0 = time.perf_counter()
            big.warm()
            res["warm_s_10m"] = (time.perf_counter() - t0) * scale
            big.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"baseline: dict-per-state automaton over {baseline_tokens:,} tokens")
    res.update(measure_baseline(text[:baseline_tokens], small.queries))
    say(f"pure fallback over {pure_tokens:,} tokens")
    pure = load_pure()
    pbuilt, psam = measure_build(pure, text[:pure_tokens], repeats=1)
    res["pure_build_tokens_per_s"] = pbuilt["build_tokens_per_s"]
    pm = measure_cursor(pure.MatchCursor(psam, corpus.separator), small.queries[:5000])
    res["pure_match_us"] = pm["match_us"]
    res["pure_draft_us"] = pm["draft_us"]
    res["pure_tokens"] = min(pure_tokens, len(text))
    return res


TARGETS = {
    "build_tokens_per_s": (">=", 1.5e6),
    "bytes_per_token_disk": ("<=", 48.0),
    "bytes_per_token_memory": ("<=", 48.0),
    "match_plus_draft_us": ("<=", 2.0),
    "load_s_10m": ("<=", 0.3),
}


def format_report(res: Report) -> str:
    res = dict(res)
    match, draft = res["match_us"], res["draft_us"]
    if isinstance(match, int | float) and isinstance(draft, int | float):
        res["match_plus_draft_us"] = match + draft
    rows = [
        ("build (tokens/s)", "build_tokens_per_s", "{:,.0f}"),
        ("bytes/token on disk", "bytes_per_token_disk", "{:.1f}"),
        ("bytes/token in memory", "bytes_per_token_memory", "{:.1f}"),
        ("µs per match step", "match_us", "{:.2f}"),
        (f"µs per draft ({DRAFT_N})", "draft_us", "{:.2f}"),
        ("µs per match step, mapped", "match_us_mapped", "{:.2f}"),
        (f"µs per draft ({DRAFT_N}), mapped", "draft_us_mapped", "{:.2f}"),
        (f"µs per tree draft {TREE}", "tree_draft_us", "{:.1f}"),
        ("load of 10M tokens (s)", "load_s_10m", "{:.3f}"),
    ]
    lines = [f"{'':28} {'compiled':>14} {'dict baseline':>14} {'pure':>14}"]
    for label, key, fmt in rows:
        cells = []
        for prefix in ("", "baseline_", "pure_"):
            v = res.get(prefix + key)
            cells.append(fmt.format(v) if isinstance(v, int | float) else "-")
        lines.append(f"{label:28} {cells[0]:>14} {cells[1]:>14} {cells[2]:>14}")
    lines.append("")
    for key, (op, goal) in TARGETS.items():
        v = res.get(key)
        if not isinstance(v, int | float):
            continue
        ok = v >= goal if op == ">=" else v <= goal
        lines.append(f"target {key} {op} {goal:g}: {v:,.3g} {'ok' if ok else 'MISSED'}")
    return "\n".join(lines)
