"""One chat message: header, Markdown body, provenance view and stored figures."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.widgets import Collapsible, Markdown, ProgressBar, Static
from textual.widgets.markdown import MarkdownStream

from samchat.chat.live_stats import format_stats
from samchat.corpus.retrieval import split_content
from samchat.figures import StoredStats

# Drafter -> theme variable used to colour its tokens (plain tokens stay uncoloured).
PROVENANCE_STYLES = {"dyn": "$prov-dyn", "static": "$prov-static", "tr": "$prov-tr"}
PROVENANCE_LABELS = {"dyn": "dynamic SAM", "static": "static SAM", "tr": "Token Recycling"}

Spans = list[list[Any]]  # [[text, source], ...] with neighbouring equal sources merged


def add_span(spans: Spans, text: str, source: str) -> None:
    if not text:
        return
    if spans and spans[-1][1] == source:
        spans[-1][0] += text
    else:
        spans.append([text, source])


def provenance_content(spans: Spans) -> Content:
    parts: list[str | tuple[str, str]] = []
    for text, source in spans:
        style = PROVENANCE_STYLES.get(source)
        parts.append((text, f"bold {style}") if style else text)
    return Content.assemble(*parts)


def legend_content() -> Content:
    parts: list[str | tuple[str, str]] = ["provenance: "]
    for name, style in PROVENANCE_STYLES.items():
        parts.append((f"■ {PROVENANCE_LABELS[name]}", f"bold {style}"))
        parts.append("  ")
    parts.append("plain: uncoloured")
    return Content.assemble(*parts)


def sources_used(stats: StoredStats | None) -> Content:
    """The documents a reply was given, as its record names them ("" if none)."""
    sources = stats.sources if stats is not None else ()
    names = [f"[{i}] {s.label}" for i, s in enumerate(sources, 1)]
    return Content("sources: " + "; ".join(names)) if names else Content("")


class MessageView(Vertical, can_focus=True):
    """A message; assistant replies may stream into it. Focus one to act on it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "screen.message_up", "Previous", show=False),
        Binding("down", "screen.message_down", "Next", show=False),
        Binding("left", "screen.branch_prev", "Branch ‹", show=False),
        Binding("right", "screen.branch_next", "Branch ›", show=False),
        Binding("c", "screen.copy_message", "Copy"),
        Binding("e", "screen.edit_message", "Edit"),
    ]

    @dataclass
    class Focused(Message):
        view: MessageView

    def on_focus(self) -> None:
        self.post_message(self.Focused(self))

    def __init__(
        self,
        *,
        message_id: int | None,
        role: str,
        content: str,
        model: str | None = None,
        stats: StoredStats | None = None,  # a reply's record (None: none)
        branch: tuple[int, int] = (1, 1),
        spans: Spans | None = None,
        parent_id: int | None = None,
    ) -> None:
        super().__init__(classes=f"message -{role}")
        self.message_id = message_id
        self.parent_id = parent_id
        self.role = role
        self.content = content
        self.model = model
        self.stats = stats
        self.branch = branch
        self.spans: Spans = spans if spans is not None else self._stored_spans(content)
        self._stream: MarkdownStream | None = None

    def _stored_spans(self, content: str) -> Spans:
        """Stored provenance is [[n_chars, source], ...] over the content."""
        runs = self.stats.reply.provenance if self.stats is not None else ()
        if sum(n for n, _ in runs) == len(content):
            spans: Spans = []
            pos = 0
            for n, source in runs:
                add_span(spans, content[pos : pos + n], source)
                pos += n
            return spans
        return [[content, "plain"]] if content else []

    def compose(self) -> ComposeResult:
        yield Static(self.header_text(), classes="msg-header")
        question, sources = split_content(self.content) if self.role == "user" else ("", None)
        if sources is None:
            yield Markdown(self.content, classes="msg-body")
        else:  # what the model was given before the question, folded away
            yield Markdown(question, classes="msg-body")
            count = len(re.findall(r"^\[\d+\] ", sources, flags=re.MULTILINE))
            with Collapsible(title=f"sources ({count})", collapsed=True, classes="msg-sources"):
                yield Static(sources, markup=False)
        if self.role == "assistant":
            # While a long prompt is read, before the first token: what, and how far.
            yield Static("", classes="msg-reading-label")
            yield ProgressBar(show_eta=False, classes="msg-reading")
            yield Static(provenance_content(self.spans), classes="msg-provenance")
            yield Static(format_stats(self.stats), classes="msg-stats")
            used = Static(sources_used(self.stats), classes="msg-used")
            used.display = self.stats is not None and bool(self.stats.sources)
            yield used

    def header_text(self) -> str:
        who = "You" if self.role == "user" else (self.model or "assistant")
        if self.role == "system":
            who = "System"
        index, count = self.branch
        branch = f"  ‹ {index}/{count} ›" if count > 1 else ""
        streaming = "  …" if self._is_streaming() else ""
        return f"{who}{branch}{streaming}"

    def _is_streaming(self) -> bool:
        return getattr(self, "_stream", None) is not None

    def show_branch(self, branch: tuple[int, int]) -> None:
        """(index, count) among its siblings, as the header's ‹ i/n › shows it."""
        self.branch = branch
        self.query_one(".msg-header", Static).update(self.header_text())

    # streaming -------------------------------------------------------------
    def start_stream(self) -> None:
        self._stream = Markdown.get_stream(self.query_one(".msg-body", Markdown))
        self.query_one(".msg-header", Static).update(self.header_text())

    def show_reading(self, done: int, total: int) -> None:
        """`done` of the prompt's `total` new tokens read; the bar goes once all are."""
        label = self.query_one(".msg-reading-label", Static)
        bar = self.query_one(".msg-reading", ProgressBar)
        label.update(f"reading {total:,} tokens of the prompt… (esc stops)")
        bar.update(total=total, progress=done)
        label.display = bar.display = done < total

    async def append(self, text: str, pieces: list[tuple[str, str]]) -> None:
        if self.role == "assistant" and not self.content:
            self.show_reading(1, 1)
        self.content += text
        for piece, source in pieces:
            add_span(self.spans, piece, source)
        if self._stream is not None:
            await self._stream.write(text)
        if self.role == "assistant" and self.provenance_shown():
            self.refresh_provenance()

    def provenance_shown(self) -> bool:
        parent = self.parent
        return parent is not None and parent.has_class("-provenance")

    def refresh_provenance(self) -> None:
        """Rebuilding the coloured text is O(reply): only while it is on screen."""
        if self.role == "assistant":
            self.query_one(".msg-provenance", Static).update(provenance_content(self.spans))

    async def drop_stream(self) -> None:
        """Stop the Markdown stream of a view that left the screen mid-reply."""
        if self._stream is not None:
            stream, self._stream = self._stream, None
            await stream.stop()

    async def finish(self, message_id: int | None, stats: StoredStats | None) -> None:
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.message_id = message_id
        self.stats = stats
        if self.role == "assistant":
            self.show_reading(1, 1)  # a reply cancelled while its prompt was read
        self.spans = self._stored_spans(self.content)  # the engine's provenance, as stored
        self.query_one(".msg-header", Static).update(self.header_text())
        if self.role == "assistant":
            self.query_one(".msg-provenance", Static).update(provenance_content(self.spans))
            self.query_one(".msg-stats", Static).update(format_stats(stats))
            used = self.query_one(".msg-used", Static)
            used.update(sources_used(stats))
            used.display = stats is not None and bool(stats.sources)
