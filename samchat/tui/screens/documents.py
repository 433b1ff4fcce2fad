"""The chat's documents: retrieval over the imported corpus on or off, and attached files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from samchat.errors import SamchatError


@dataclass
class ChatDocuments:
    """What goes before each question of a chat (kept while the app runs)."""

    retrieval: bool = False
    files: list[Path] = field(default_factory=list)

    @property
    def active(self) -> bool:
        return self.retrieval or bool(self.files)

    def summary(self) -> str:
        parts = ["documents on"] if self.retrieval else []
        if self.files:
            parts.append(f"{len(self.files)} file{'s' * (len(self.files) != 1)} attached")
        return ", ".join(parts)


class DocumentsScreen(ModalScreen[ChatDocuments | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, docs: ChatDocuments) -> None:
        super().__init__(classes="dialog-screen")
        self.docs = ChatDocuments(docs.retrieval, list(docs.files))

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide", id="docs-dialog"):
            yield Label("Documents for this chat", classes="dialog-title")
            yield Checkbox(
                "Answer from the imported documents (the best passages go before each question)",
                self.docs.retrieval,
                id="docs-retrieval",
            )
            yield Static(self._files_text(), id="docs-files")
            yield Input(placeholder="path of a file to attach (enter attaches)", id="docs-path")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Done", variant="primary", id="docs-done")
                yield Button("Attach", id="docs-attach")
                yield Button("Clear files", id="docs-clear")

    def on_mount(self) -> None:
        self.query_one("#docs-path", Input).focus()

    def _files_text(self) -> str:
        if not self.docs.files:
            return "No files attached."
        return "Attached:\n" + "\n".join(f"  {p}" for p in self.docs.files)

    def _show_files(self) -> None:
        self.query_one("#docs-files", Static).update(self._files_text())

    def attach(self, text: str) -> None:
        """Check the file now (missing, binary, too large), so a bad one never gets listed."""
        from samchat.corpus.retrieval import read_attachment

        if not text.strip():
            self.notify("type the path of a file to attach", severity="warning")
            return
        path = Path(text.strip()).expanduser()
        try:
            read_attachment(path)
        except SamchatError as exc:
            self.notify(str(exc), severity="error", title="Attach")
            return
        if path not in self.docs.files:
            self.docs.files.append(path)
        self.query_one("#docs-path", Input).value = ""
        self._show_files()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.attach(event.value)

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        self.docs.retrieval = event.value

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "docs-attach":
            self.attach(self.query_one("#docs-path", Input).value)
        elif event.button.id == "docs-clear":
            self.docs.files.clear()
            self._show_files()
        else:
            self.dismiss(self.docs)

    def action_cancel(self) -> None:
        self.dismiss(None)
