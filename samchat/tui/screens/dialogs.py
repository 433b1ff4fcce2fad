"""Small modal dialogs: confirm, one-line input, multi-line editor, pick from a list."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, TextArea
from textual.widgets.option_list import Option


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(False)", "Cancel"),
        Binding("y", "dismiss(True)", "Yes", show=False),
        Binding("n", "dismiss(False)", "No", show=False),
    ]

    def __init__(self, question: str, yes: str = "Delete") -> None:
        super().__init__(classes="dialog-screen")
        self.question = question
        self.yes = yes

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-title")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.yes, variant="error", id="yes")
                yield Button("Cancel", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class InputScreen(ModalScreen[str | None]):
    """One line of text; enter accepts, escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, value: str = "", placeholder: str = "") -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text, classes="dialog-title")
            yield Input(self.value, placeholder=self.placeholder, id="dialog-input")
            yield Label("enter: accept · esc: cancel", classes="dialog-hint")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)


class EditorScreen(ModalScreen[str | None]):
    """Multi-line text; ctrl+s accepts, escape cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "accept", "Accept", priority=True),
    ]

    def __init__(self, title: str, text: str = "", accept: str = "Save") -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.text = text
        self.accept_label = accept

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label(self.title_text, classes="dialog-title")
            yield TextArea(self.text, id="dialog-editor", soft_wrap=True)
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self.accept_label} (ctrl+s)", variant="primary", id="accept")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        editor = self.query_one("#dialog-editor", TextArea)
        editor.focus()
        editor.move_cursor(editor.document.end)

    def action_accept(self) -> None:
        self.dismiss(self.query_one("#dialog-editor", TextArea).text)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "accept":
            self.action_accept()
        else:
            self.dismiss(None)


class PickScreen(ModalScreen[int | None]):
    """Choose one of several labelled items; returns its index."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, labels: list[str]) -> None:
        super().__init__(classes="dialog-screen")
        self.title_text = title
        self.labels = labels

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide"):
            yield Label(self.title_text, classes="dialog-title")
            yield OptionList(
                *[Option(label, id=str(i)) for i, label in enumerate(self.labels)],
                id="pick-list",
            )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(int(event.option.id or 0))
