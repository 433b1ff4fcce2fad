"""Splitting a document into passages: by headings, paragraphs and code blocks, each at most
PASSAGE_TOKENS (estimated) long, so retrieval can hand the model the part that answers.

Pure text in, text out: the store calls it as documents are added (and its migration, for the
documents stored before passages existed), so no tokenizer is at hand. `estimate_tokens` counts
words and punctuation, close to a BPE count for prose; prompt fitting counts exactly later.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

PASSAGE_TOKENS = 220  # upper bound per passage (estimated tokens)
_TOKEN = re.compile(r"\w+|[^\w\s]")
_MD_HEADING = re.compile(r"(#{1,6})\s+(.+?)\s*#*\s*$")
_RST_UNDERLINE = re.compile(r"([=\-~^\"'`#*+])\1{2,}\s*")
_FENCE = re.compile(r"\s*(```|~~~)")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass(frozen=True)
class Chunk:
    heading: str  # the section it sits under ("" before any heading)
    text: str


def estimate_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def _blocks_markdown(text: str) -> list[tuple[str, str]]:
    """(heading path, block) pairs: a fenced code block is one block; paragraphs end at blank
    lines; a heading line starts a new section."""
    headings: list[tuple[int, str]] = []  # the open sections, outermost first
    out: list[tuple[str, str]] = []
    para: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if para and "".join(para).strip():
            path = " › ".join(h for _, h in headings)
            out.append((path, "\n".join(para).strip("\n")))
        para.clear()

    for line in text.splitlines():
        opening = _FENCE.match(line)
        if fence is not None:
            para.append(line)
            if opening and opening.group(1) == fence:
                fence = None
                flush()
            continue
        if opening:
            flush()
            fence = opening.group(1)
            para.append(line)
            continue
        heading = _MD_HEADING.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            while headings and headings[-1][0] >= level:
                headings.pop()
            headings.append((level, heading.group(2)))
            continue
        if not line.strip():
            flush()
        else:
            para.append(line)
    flush()
    return out


def _blocks_rst(text: str) -> list[tuple[str, str]]:
    lines = text.splitlines()
    out: list[tuple[str, str]] = []
    heading = ""
    para: list[str] = []
    skip = False
    for a, b in itertools.zip_longest(lines, lines[1:], fillvalue=""):
        if skip:
            skip = False
            continue
        if a.strip() and _RST_UNDERLINE.fullmatch(b) and not _RST_UNDERLINE.fullmatch(a):
            if para:
                out.append((heading, "\n".join(para)))
                para = []
            heading, skip = a.strip(), True
            continue
        if a.strip():
            para.append(a)
        elif para:
            out.append((heading, "\n".join(para)))
            para = []
    if para:
        out.append((heading, "\n".join(para)))
    return out


def _blocks_plain(text: str) -> list[tuple[str, str]]:
    return [("", p.strip("\n")) for p in re.split(r"\n\s*\n", text) if p.strip()]


def _pieces(block: str, limit: int) -> list[str]:
    """A block over the limit, cut at lines, then sentences, then words."""
    if estimate_tokens(block) <= limit:
        return [block]
    for unit, joiner in ((block.split("\n"), "\n"), (_SENTENCE.split(block), " ")):
        if len(unit) > 1:
            return _pack([p for u in unit for p in _pieces(u, limit)], limit, joiner)
    words = block.split(" ")
    out: list[str] = []
    cur: list[str] = []
    for word in words:
        if cur and estimate_tokens(" ".join([*cur, word])) > limit:
            out.append(" ".join(cur))
            cur = []
        cur.append(word)
    return [*out, " ".join(cur)] if cur else out


def _pack(parts: list[str], limit: int, joiner: str) -> list[str]:
    """Consecutive parts joined while the total stays within the limit."""
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for part in parts:
        n = estimate_tokens(part)
        if cur and size + n > limit:
            out.append(joiner.join(cur))
            cur, size = [], 0
        cur.append(part)
        size += n
    if cur:
        out.append(joiner.join(cur))
    return out


def split_passages(text: str, kind: str, limit: int = PASSAGE_TOKENS) -> list[Chunk]:
    """The document's passages in order. Blocks of one section are packed together up to
    `limit`; a section never spills into the next one's passage."""
    if kind == "markdown":
        blocks = _blocks_markdown(text)
    elif kind == "rst":
        blocks = _blocks_rst(text)
    else:  # text, code (blank lines part top-level definitions), html and pdf extracts
        blocks = _blocks_plain(text)
    chunks: list[Chunk] = []
    for heading, group in itertools.groupby(blocks, key=lambda hb: hb[0]):
        parts = [p for _, block in group for p in _pieces(block, limit)]
        chunks.extend(Chunk(heading, t) for t in _pack(parts, limit, "\n\n") if t.strip())
    return chunks
