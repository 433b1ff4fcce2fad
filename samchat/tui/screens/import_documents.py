"""Import documents (a file or a folder) into the store and the static index, in a worker."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Log, ProgressBar

from samchat.errors import SamchatError

# progress(done, total, what); returns a one-line summary, raises SamchatError on failure.
Importer = Callable[[str, Callable[[int, int, str], None]], str]


class ImportScreen(ModalScreen[str | None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "Close")]

    def __init__(
        self,
        importer: Importer,
        on_done: Callable[[], None] | None = None,
        on_use: Callable[[], None] | None = None,
    ) -> None:
        """on_done runs on the UI thread after an import, even if the screen was closed;
        on_use after a successful one the user asked to answer from (the checkbox)."""
        super().__init__(classes="dialog-screen")
        self.importer = importer
        self.on_done = on_done
        self.on_use = on_use
        self.use_in_chat = False  # the checkbox, as it was when the import started
        self.running = False
        self.summary: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog -wide", id="import-dialog"):
            yield Label(
                "Import documents (text, Markdown, HTML, PDF; file or folder)",
                classes="dialog-title",
            )
            yield Input(placeholder="path to a file or folder", id="import-path")
            if self.on_use is not None:
                yield Checkbox("Answer from the documents in this chat", id="import-use")
            yield ProgressBar(total=None, id="import-progress", show_eta=False)
            yield Log(id="import-log", max_lines=500)
            with Horizontal(classes="dialog-buttons"):
                yield Button("Import", variant="primary", id="import-start")
                yield Button("Close (esc)", id="import-close")

    def on_mount(self) -> None:
        self.query_one("#import-path", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.start(event.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "import-start":
            self.start(self.query_one("#import-path", Input).value)
        else:
            self.action_close()

    def action_close(self) -> None:
        if self.running:
            self.notify("the import is still running; it finishes in the background")
        self.dismiss(self.summary)

    def start(self, path: str) -> None:
        path = path.strip()
        if not path:
            self.notify("type the path of a file or folder to import", severity="warning")
            return
        if self.running:
            self.notify("an import is already running", severity="warning")
            return
        self.running = True
        boxes = self.query("#import-use")
        self.use_in_chat = bool(boxes) and bool(self.query_one("#import-use", Checkbox).value)
        self.query_one("#import-log", Log).write_line(f"importing {path} …")
        self.run_import(path)

    def _progress(self, done: int, total: int, what: str) -> None:
        if not self.is_attached:  # closed while the import goes on
            return
        bar = self.query_one("#import-progress", ProgressBar)
        bar.update(total=max(total, 1), progress=done)
        if what:
            self.query_one("#import-log", Log).write_line(what)

    def _finished(self, summary: str | None, error: str | None) -> None:
        self.running = False
        if self.on_done is not None:
            self.on_done()
        if error is not None:
            self.app.notify(error, severity="error", title="Import", timeout=10)
        else:
            self.summary = summary
            self.app.notify(summary or "import done", title="Import")
            if self.on_use is not None and self.use_in_chat:
                self.on_use()
        if not self.is_attached:
            return
        log = self.query_one("#import-log", Log)
        if error is not None:
            log.write_line(f"failed: {error}")
            return
        bar = self.query_one("#import-progress", ProgressBar)
        bar.update(total=bar.total or 1, progress=bar.total or 1)
        log.write_line(summary or "done")

    @work(thread=True, exclusive=True, group="import", exit_on_error=False)
    def run_import(self, path: str) -> None:
        def progress(done: int, total: int, what: str) -> None:
            self.app.call_from_thread(self._progress, done, total, what)

        try:
            summary = self.importer(path, progress)
        except SamchatError as exc:
            self.app.call_from_thread(self._finished, None, str(exc))
        except Exception as exc:  # never crash the app over an import
            self.app.call_from_thread(self._finished, None, f"{type(exc).__name__}: {exc}")
        else:
            self.app.call_from_thread(self._finished, summary, None)
