"""Reading one file into plain text: text, Markdown, reST, source code, HTML and PDF."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
_SNIFF_BYTES = 8192

_KINDS = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "rst",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
}
_CODE = {
    ".py", ".pyi", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go", ".java", ".kt", ".js",
    ".mjs", ".ts", ".tsx", ".jsx", ".rb", ".php", ".cs", ".swift", ".scala", ".sh", ".bash",
    ".zsh", ".fish", ".lua", ".pl", ".r", ".sql", ".toml", ".yaml", ".yml", ".ini", ".cfg",
    ".json", ".css", ".scss", ".xml", ".tex", ".hs", ".ml", ".ex", ".exs", ".clj", ".el",
    ".vim", ".zig", ".nim", ".dart", ".m", ".mm", ".f90", ".jl", ".cmake", ".mk",
}  # fmt: skip


class Skip(Exception):
    """This file is not imported; the message says why (shown in the import summary)."""


@dataclass(frozen=True)
class ReadDocument:
    title: str
    text: str
    kind: str  # text | markdown | rst | code | html | pdf


def kind_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in _KINDS:
        return _KINDS[suffix]
    if suffix in _CODE or path.name in ("Makefile", "Dockerfile", "CMakeLists.txt"):
        return "code"
    return "text"  # unknown or no suffix (LICENSE, GPL-3, notes.1): sniffed below


def _size_text(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


_UTF16_32_BOMS = (b"\xff\xfe", b"\xfe\xff")  # also the start of UTF-32's BOMs


def _decode(data: bytes) -> str:
    """UTF-8 (a BOM is dropped); other encodings (Latin-1, cp1252, Shift-JIS, UTF-16 with a
    BOM, ...) are detected by charset-normalizer. Binary data, or text no encoding explains,
    is skipped."""
    if b"\x00" in data[:_SNIFF_BYTES] and not data.startswith(_UTF16_32_BOMS):
        raise Skip("binary file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        failure = (
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}) and no other "
            "encoding fits; convert it to UTF-8 first"
        )
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        raise Skip(failure)
    # Western text scores the same in several code pages (é is 0xe9 in all of them); on a tie
    # take Windows-1252, by far the commonest of them on disk.
    for match in matches:
        if match.encoding == "cp1252" and (match.chaos, -match.coherence) <= (
            best.chaos,
            -best.coherence,
        ):
            return str(match)
    return str(best)


def _title_from_text(text: str, kind: str, fallback: str) -> str:
    lines = text.splitlines()
    if kind == "markdown":
        for line in lines:
            m = re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line)
            if m:
                return m.group(1)
    if kind == "rst":
        for a, b in itertools.pairwise(lines):
            if a.strip() and re.fullmatch(r"([=\-~^\"'`#*+])\1{2,}\s*", b):
                return a.strip()
    return fallback


def _read_html(data: bytes, fallback: str) -> ReadDocument:
    import trafilatura

    html = _decode(data)
    text = trafilatura.extract(html, include_comments=False, favor_recall=True)
    if not text or not text.strip():
        raise Skip("HTML without extractable text")
    meta = trafilatura.extract_metadata(html)
    title = meta.title if meta is not None and meta.title else fallback
    return ReadDocument(title=title, text=text, kind="html")


def _read_pdf(path: Path, fallback: str) -> ReadDocument:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise Skip("encrypted PDF")
        pages = [page.extract_text() or "" for page in reader.pages]
        meta = reader.metadata
        title = meta.title if meta is not None and meta.title else fallback
    except Skip:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        raise Skip(f"unreadable PDF ({type(exc).__name__}: {str(exc)[:80]})") from None
    text = "\n\n".join(p.strip() for p in pages if p.strip())
    if not text:
        raise Skip("PDF without a text layer (scanned?)")
    return ReadDocument(title=str(title), text=text, kind="pdf")


def read_file(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> ReadDocument:
    """Read a file into text, or raise Skip with the reason it cannot be imported."""
    try:
        size = path.stat().st_size
        if size == 0:
            raise Skip("empty file")
        if size > max_bytes:
            raise Skip(
                f"too large ({_size_text(size)} > {_size_text(max_bytes)} limit; see --max-size)"
            )
        kind = kind_of(path)
        if kind == "pdf":
            doc = _read_pdf(path, path.name)
        else:
            data = path.read_bytes()
            if kind == "html":
                doc = _read_html(data, path.name)
            else:
                text = _decode(data)
                doc = ReadDocument(_title_from_text(text, kind, path.name), text, kind)
    except OSError as exc:
        raise Skip(f"cannot read ({exc.strerror})") from None
    if not doc.text.strip():
        raise Skip("empty file (only whitespace)")
    return doc
