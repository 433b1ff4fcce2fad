"""Code blocks of a Markdown message (for copying one)."""

from __future__ import annotations


def code_blocks(markdown: str) -> list[str]:
    """Fenced and indented code blocks of a Markdown text, in order."""
    if "```" not in markdown and "~~~" not in markdown and "    " not in markdown:
        return []
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(markdown)
    return [t.content for t in tokens if t.type in ("fence", "code_block")]
