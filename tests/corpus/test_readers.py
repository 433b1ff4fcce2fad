"""Reading each supported format from real files, and the reasons files are skipped."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdf_sample import make_pdf

from samchat.corpus.readers import Skip, kind_of, read_file


def test_markdown_title_and_text(tmp_path: Path) -> None:
    p = tmp_path / "notes.md"
    p.write_text("Intro line\n\n## Suffix automata\n\nThey match in O(1).\n")
    doc = read_file(p)
    assert (doc.kind, doc.title) == ("markdown", "Suffix automata")
    assert "They match in O(1)." in doc.text


def test_rst_title(tmp_path: Path) -> None:
    p = tmp_path / "guide.rst"
    p.write_text("\nInstalling samchat\n==================\n\nRun make.\n")
    doc = read_file(p)
    assert (doc.kind, doc.title) == ("rst", "Installing samchat")


def test_code_and_extensionless_text(tmp_path: Path) -> None:
    code = tmp_path / "x.py"
    code.write_text("def f():\n    return 1\n")
    assert read_file(code).kind == "code" and read_file(code).title == "x.py"
    lic = tmp_path / "LGPL-2.1"  # a suffix that is not a file type
    lic.write_text("GNU LESSER GENERAL PUBLIC LICENSE\n")
    assert read_file(lic).kind == "text"
    assert kind_of(Path("Makefile")) == "code"


def test_utf8_bom_is_dropped(tmp_path: Path) -> None:
    p = tmp_path / "bom.txt"
    p.write_bytes(b"\xef\xbb\xbfhello")
    assert read_file(p).text == "hello"


def test_html_goes_through_extraction(tmp_path: Path) -> None:
    p = tmp_path / "page.html"
    p.write_text(
        "<html><head><title>Page title</title><script>var tracking = 1;</script></head><body>"
        "<nav>Home | About | Contact</nav><article><h1>Drafting with automata</h1>"
        "<p>A suffix automaton finds the longest match of the generated text in the corpus,"
        " and the tokens after it become the draft the model verifies in one pass.</p>"
        "</article></body></html>"
    )
    doc = read_file(p)
    assert doc.kind == "html"
    assert "longest match of the generated text" in doc.text
    assert "tracking" not in doc.text and "<p>" not in doc.text
    assert doc.title in ("Page title", "Drafting with automata")


def test_pdf_text_layer_and_title(tmp_path: Path) -> None:
    p = tmp_path / "paper.pdf"
    make_pdf(p, ["Speculative decoding is lossless.", "Greedy output stays the same."], "Paper")
    doc = read_file(p)
    assert (doc.kind, doc.title) == ("pdf", "Paper")
    assert "Speculative decoding is lossless." in doc.text
    assert "Greedy output stays the same." in doc.text


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary file"),
        (
            "noise.txt",
            bytes(range(1, 256)) * 4,
            "not UTF-8 text (byte 0x80 at offset 127) and no other encoding fits",
        ),
        ("empty.txt", b"", "empty file"),
        ("blank.md", b"  \n\n\t\n", "only whitespace"),
        ("broken.pdf", b"%PDF-1.4\nthis is not really a pdf", "unreadable PDF"),
        ("script.html", b"<html><body><script>x()</script></body></html>", "HTML without"),
    ],
)
def test_skips_have_reasons(tmp_path: Path, name: str, data: bytes, reason: str) -> None:
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(Skip, match=reason.replace("(", r"\(").replace(")", r"\)")):
        read_file(p)


def test_oversized_is_skipped_before_reading(tmp_path: Path) -> None:
    p = tmp_path / "big.txt"
    p.write_text("x" * 5000)
    with pytest.raises(Skip, match=r"too large \(4\.9 KB > 1\.0 KB limit"):
        read_file(p, max_bytes=1024)
    assert read_file(p, max_bytes=5000).text == "x" * 5000


FRENCH = (
    "Le café de la gare était fermé, mais la boulangère nous a offert des crêpes. "
    "Nous avons marché jusqu'à l'église où l'on célébrait une fête très animée. "
    "Après le dîner, les élèves ont répété leur pièce de théâtre préférée.\n"
)
RUSSIAN = "Привет! Это проверка кодировки: текст должен читаться правильно, без искажений.\n"
JAPANESE = "日本語のテキストです。文字コードの検出をテストします。よろしくお願いします。\n"


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        (FRENCH * 3, "cp1252"),
        (FRENCH * 3, "latin-1"),
        (RUSSIAN * 4, "cp1251"),
        (JAPANESE * 4, "shift_jis"),
        (FRENCH * 3, "utf-16"),  # with its BOM: NUL bytes, yet text
    ],
)
def test_text_in_other_encodings_is_read(tmp_path: Path, text: str, encoding: str) -> None:
    p = tmp_path / "notes.txt"
    p.write_bytes(text.encode(encoding))
    doc = read_file(p)
    assert doc.text == text and doc.kind == "text"
