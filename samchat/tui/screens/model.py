"""Pick a model (the bundled default, one found on this machine, one a configured endpoint
serves, a local directory / GGUF file, a hub id or an openai: URL), the engine that runs it and
the device: the current ModelSpec with those three replaced, so the command line's other options
(--dtype, --cuda-graphs…) go with the model picked."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Select
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState

from samchat.engines.registry import AUTO, ENGINES, engine_kind, resolve
from samchat.models.catalog import ModelEntry, list_models
from samchat.models.default import DEFAULT_MODEL_NAME
from samchat.models.device import DEVICES
from samchat.models.loader import ModelSpec

if TYPE_CHECKING:
    from samchat.remote.endpoint import Endpoint

DEFAULT_LABEL = f"default: {DEFAULT_MODEL_NAME} (bundled, offline)"
ENGINE_HELP = "auto: llama.cpp for a .gguf on the CPU, else torch; flat: the GGUF's own numbers"


class ModelScreen(ModalScreen[ModelSpec | None]):
    """Returns `current` with the source (None: the bundled default), device and engine picked."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(
        self,
        current: ModelSpec,
        recent: list[str],
        catalog: Path | None = None,
        endpoints: Mapping[str, Endpoint] | None = None,
    ) -> None:
        """catalog: the list of GGUF files loaded before (`models.catalog.recent_file`);
        endpoints: config.toml's, whose models are listed too."""
        super().__init__(classes="dialog-screen")
        self.catalog = catalog
        self.endpoints = dict(endpoints or {})
        self.current = current
        self.device = current.device if current.device in DEVICES else "auto"
        engine = resolve(current.engine, current.dtype)[0]  # torch with int4: the flat engine
        self.engine = engine if engine in ENGINES else "auto"
        self.recent = [r for r in recent if r]
        self.found: list[ModelEntry] = []  # filled by a worker: scanning caches takes a while

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide", id="model-dialog"):
            yield Label("Load a model", classes="dialog-title")
            yield OptionList(
                Option(DEFAULT_LABEL, id="model-default"),
                *[Option(src, id=f"model-recent-{i}") for i, src in enumerate(self.recent)],
                id="model-list",
            )
            yield Input(
                self.current.source or "",
                placeholder="model directory, .gguf file, hub id or openai:URL (empty = default)",
                id="model-source",
            )
            with Horizontal(classes="field"):
                yield Label("engine", classes="field-name")
                yield Select(
                    [(e, e) for e in ENGINES],
                    value=self.engine,
                    allow_blank=False,
                    id="model-engine",
                )
                yield Label(ENGINE_HELP, classes="field-help")
            with Horizontal(classes="field"):
                yield Label("device", classes="field-name")
                yield Select(
                    [(d, d) for d in DEVICES],
                    value=self.device,
                    allow_blank=False,
                    id="model-device",
                )
            with Horizontal(classes="dialog-buttons"):
                yield Button("Load", variant="primary", id="load")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#model-source", Input).focus()
        self.run_worker(
            partial(list_models, self.catalog),
            thread=True,
            name="model-catalog",
            exit_on_error=False,
        )
        if self.endpoints:  # a slow or absent server only delays its own entries
            self.run_worker(
                partial(_endpoint_models, self.endpoints),
                thread=True,
                name="model-endpoints",
                exit_on_error=False,
            )

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The models `samchat models` lists (Hugging Face cache, Ollama, LM Studio, GGUF files
        used before) join the list once the scan ends; a failed scan only leaves them out."""
        if event.state != WorkerState.SUCCESS:
            return
        if event.worker.name == "model-catalog":
            entries: list[ModelEntry] = event.worker.result or []
        elif event.worker.name == "model-endpoints":
            entries, problems = event.worker.result or ([], [])
            for problem in problems:
                self.notify(problem, title="Endpoints", severity="warning", timeout=8)
        else:
            return
        shown = {"", *self.recent, *(e.source for e in self.found)}
        new = [e for e in entries if e.source not in shown]
        start = len(self.found)
        self.found += new
        self.query_one("#model-list", OptionList).add_options(
            Option(_label(e), id=f"model-found-{start + i}") for i, e in enumerate(new)
        )

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        kind, _, index = (event.option.id or "").removeprefix("model-").partition("-")
        if kind == "recent":
            source = self.recent[int(index)]
        elif kind == "found":
            source = self.found[int(index)].source
        else:
            source = ""
        self.query_one("#model-source", Input).value = source
        self._accept()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._accept()

    def _accept(self) -> None:
        device = self.query_one("#model-device", Select).value
        engine = self.query_one("#model-engine", Select).value
        source = self.query_one("#model-source", Input).value.strip()
        # A format belongs to its engine: one the new engine does not take goes back to auto.
        dtype = self.current.dtype
        if (
            engine not in (AUTO, self.current.engine)
            and dtype not in engine_kind(str(engine)).dtypes
        ):
            dtype = "auto"
        spec = dataclasses.replace(
            self.current, source=source or None, device=str(device), engine=str(engine), dtype=dtype
        )
        self.dismiss(spec)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "load":
            self._accept()
        else:
            self.dismiss(None)


def _endpoint_models(endpoints: Mapping[str, Endpoint]) -> tuple[list[ModelEntry], list[str]]:
    """In a thread worker: abandoned at once when the screen closes."""
    from textual.worker import get_current_worker

    from samchat.remote.client import endpoint_models

    worker = get_current_worker()
    return endpoint_models(endpoints, lambda: worker.is_cancelled)


def _label(entry: ModelEntry) -> str:
    size = f", {entry.size / 1e9:.1f} GB" if entry.size else ""
    return f"{entry.name} ({entry.origin}, {entry.format}{size})"
