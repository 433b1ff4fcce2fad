"""Decoding method, its knobs and sampling. Returns (decoding, sampling) dicts, validated."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select

from samchat.tui.config import (
    DECODING_DEFAULTS,
    METHODS,
    SAMPLING_DEFAULTS,
    ConfigError,
    validate_decoding,
    validate_sampling,
)

HELP = {
    "l_threshold": "shortest suffix match that the SAM drafters trust",
    "l_bias": "match length above which SAM drafts win over Token Recycling",
    "max_draft": "most draft tokens verified per step (0 = fitted to the hardware)",
    "alpha": "SAM draft length: 1 + alpha × match length (up to max_draft)",
    "static_tree_topk": "tree drafts from the static index (0 = sequences only)",
    "max_new_tokens": "longest reply",
    "temperature": "0 = greedy (lossless: same text as plain decoding)",
    "top_p": "nucleus sampling mass (1 = off)",
    "top_k": "sample among the k likeliest (0 = off)",
    "seed": "fixed sampling seed (-1 = random)",
}

Result = tuple[dict[str, Any], dict[str, Any]]


class SettingsScreen(ModalScreen[Result | None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "save", "Save", priority=True),
    ]

    def __init__(self, decoding: dict[str, Any], sampling: dict[str, Any]) -> None:
        super().__init__(classes="dialog-screen")
        self.decoding = dict(decoding)
        self.sampling = dict(sampling)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide -tall", id="settings-dialog"):
            yield Label("Settings", classes="dialog-title")
            with VerticalScroll(id="settings-form"):
                yield Label("Decoding", classes="section")
                with Horizontal(classes="field"):
                    yield Label("method", classes="field-name")
                    yield Select(
                        [(m, m) for m in METHODS],
                        value=self.decoding.get("method", "sam+tr"),
                        allow_blank=False,
                        id="set-method",
                    )
                for key in DECODING_DEFAULTS:
                    if key != "method":
                        yield from self._field(key, self.decoding[key])
                yield Label("Sampling", classes="section")
                for key in SAMPLING_DEFAULTS:
                    yield from self._field(key, self.sampling[key])
            with Horizontal(classes="dialog-buttons"):
                yield Button("Save (ctrl+s)", variant="primary", id="save")
                yield Button("Cancel (esc)", id="cancel")

    def _field(self, key: str, value: Any) -> ComposeResult:
        with Horizontal(classes="field"):
            yield Label(key, classes="field-name")
            yield Input(str(value), id=f"set-{key}", classes="field-input")
            yield Label(HELP.get(key, ""), classes="field-help")

    def _read(self, keys: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in keys:
            raw = self.query_one(f"#set-{key}", Input).value.strip()
            try:
                out[key] = int(raw)
            except ValueError:
                try:
                    out[key] = float(raw)
                except ValueError:
                    raise ConfigError(f"{key}: {raw!r} is not a number") from None
        return out

    def action_save(self) -> None:
        try:
            decoding = self._read([k for k in DECODING_DEFAULTS if k != "method"])
            decoding["method"] = self.query_one("#set-method", Select).value
            sampling = self._read(list(SAMPLING_DEFAULTS))
            for key in ("temperature", "top_p"):  # "1" typed for a float knob is fine
                sampling[key] = float(sampling[key])
            result = (validate_decoding(decoding), validate_sampling(sampling))
        except ConfigError as exc:
            self.notify(str(exc), severity="error", title="Settings")
            return
        self.dismiss(result)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "save":
            self.action_save()
        else:
            self.dismiss(None)
