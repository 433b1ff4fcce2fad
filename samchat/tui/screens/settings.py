"""The decoding and sampling settings: one row per knob of DecodingConfig, then of SamplingParams,
as samchat/decoding/params.py declares them (the widget follows the knob's type, the help text
is the knob's). Returns (decoding, sampling), parsed and validated by params.py."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Switch

from samchat.decoding.knobs import KnobClass, KnobValue
from samchat.decoding.params import (
    DecodingConfig,
    Knob,
    SamplingParams,
    from_mapping,
    knobs,
    to_mapping,
)
from samchat.errors import SamchatError

# Knobs with no row, and why (they keep their value from config.toml).
EXCLUDED = {
    "stop": "a list of any strings (newlines, commas) that one input line cannot hold",
}
SECTIONS: tuple[tuple[str, type[KnobClass]], ...] = (
    ("Decoding", DecodingConfig),
    ("Sampling", SamplingParams),
)

Result = tuple[DecodingConfig, SamplingParams]
T = TypeVar("T", DecodingConfig, SamplingParams)


def form_knobs(cls: type[KnobClass]) -> list[Knob]:
    """The knobs of `cls` that get a row, in declaration order."""
    return [k for k in knobs(cls) if k.name not in EXCLUDED]


class SettingsScreen(ModalScreen[Result | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "save", "Save", priority=True),
    ]

    def __init__(self, decoding: DecodingConfig, sampling: SamplingParams) -> None:
        super().__init__(classes="dialog-screen")
        # The form's starting values by knob name (the widgets hold them from then on).
        self.values: dict[type[KnobClass], dict[str, KnobValue]] = {
            DecodingConfig: to_mapping(decoding),
            SamplingParams: to_mapping(sampling),
        }

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide -tall", id="settings-dialog"):
            yield Label("Settings", classes="dialog-title")
            with VerticalScroll(id="settings-form"):
                for title, cls in SECTIONS:
                    yield Label(title, classes="section")
                    values = self.values[cls]
                    for knob in form_knobs(cls):
                        yield from self._row(knob, values.get(knob.name, knob.default))
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (ctrl+s)", variant="primary", id="save")
                yield Button("Cancel (esc)", id="cancel")

    def _row(self, knob: Knob, value: object) -> ComposeResult:
        with Horizontal(classes="field"):
            yield Label(knob.name, classes="field-name")
            wid = f"set-{knob.name}"
            if knob.choices:
                options = [(c, c) for c in knob.choices]
                yield Select(options, value=value, allow_blank=False, id=wid)
            elif knob.type is bool:
                yield Switch(bool(value), id=wid, classes="field-switch")
            else:
                hint = "random" if knob.optional else ""
                yield Input(knob.text(value), placeholder=hint, id=wid, classes="field-input")
            yield Label(knob.help, classes="field-help")

    def _read(self, cls: type[T]) -> T:
        """The form's values for `cls` (knobs without a row keep theirs), parsed and checked."""
        values: dict[str, object] = dict(self.values[cls])
        for knob in form_knobs(cls):
            widget = self.query_one(f"#set-{knob.name}")
            if isinstance(widget, Input):
                values[knob.name] = knob.parse(widget.value)
            elif isinstance(widget, (Select, Switch)):
                values[knob.name] = widget.value
        return from_mapping(cls, values)

    def action_save(self) -> None:
        try:
            result = (self._read(DecodingConfig), self._read(SamplingParams))
        except SamchatError as exc:
            self.notify(str(exc), severity="error", title="Settings")
            return
        self.dismiss(result)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)
