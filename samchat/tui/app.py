"""The samchat Textual app: sidebar, streaming chat, live speedup statistics, actions."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import Button, Footer, Input, OptionList, Static

from samchat.errors import SamchatError
from samchat.tui import backend
from samchat.tui.chat_view import ChatView
from samchat.tui.config import Config, ConfigError, load_config, save_config
from samchat.tui.dialogs import ConfirmScreen, EditorScreen, InputScreen, PickScreen
from samchat.tui.help_screen import HelpScreen
from samchat.tui.import_screen import ImportScreen
from samchat.tui.live_stats import LiveStats, stats_to_dict
from samchat.tui.messages import MessageView, legend_content
from samchat.tui.model_screen import ModelScreen
from samchat.tui.prompt import PromptArea
from samchat.tui.settings_screen import SettingsScreen
from samchat.tui.sidebar import Sidebar
from samchat.tui.stats_bar import SPARK_POINTS, StatsBar
from samchat.tui.themes import PROVENANCE_DEFAULTS, load_themes

if TYPE_CHECKING:
    from samchat.models.loader import LoadedModel

# (action, default key, description, binding id suffix, shown in footer)
ACTIONS: list[tuple[str, str, str, bool]] = [
    ("help", "f1", "Help", True),
    ("new_chat", "ctrl+n", "New chat", True),
    ("rename_chat", "f2", "Rename chat", False),
    ("delete_chat", "f8", "Delete chat", False),
    ("system_prompt", "f12", "System prompt", False),
    ("search", "ctrl+f", "Search chats", False),
    ("stop", "escape", "Stop", True),
    ("regenerate", "ctrl+r", "Regenerate", True),
    ("edit_message", "f4", "Edit & resend", False),
    ("branch_prev", "ctrl+b", "Previous branch", False),
    ("branch_next", "ctrl+g", "Next branch", False),
    ("copy_message", "f5", "Copy message", False),
    ("copy_code", "f3", "Copy code block", False),
    ("toggle_provenance", "f9", "Provenance", True),
    ("toggle_stats", "f6", "Reply figures", False),
    ("load_earlier", "ctrl+u", "Load earlier messages", False),
    ("message_up", "ctrl+up", "Select previous message", False),
    ("message_down", "ctrl+down", "Select next message", False),
    ("pick_model", "ctrl+l", "Model", True),
    ("import_documents", "ctrl+o", "Import", True),
    ("settings", "ctrl+s", "Settings", True),
    ("pick_theme", "ctrl+t", "Theme", False),
]
# Keys a focused text widget would otherwise take.
PRIORITY = {"f6", "ctrl+u", "f12"}


def binding_id(action: str) -> str:
    return f"samchat.{action}"


def _bindings() -> list[BindingType]:
    return [
        Binding(key, action, desc, show=show, id=binding_id(action), priority=key in PRIORITY)
        for action, key, desc, show in ACTIONS
    ]


# -- messages from worker threads -----------------------------------------------------------


@dataclass
class ReplyJob:
    chat_id: int
    parent_id: int  # the user message answered
    view: MessageView
    live: LiveStats
    model: str
    cancel: threading.Event = field(default_factory=threading.Event)


class ReplyDelta(Message):
    def __init__(
        self,
        job: ReplyJob,
        text: str,
        pieces: list[tuple[str, str]],
        n: int,
        sources: list[str],
        t: float,
    ) -> None:
        super().__init__()
        self.job, self.text, self.pieces, self.n, self.sources, self.t = (
            job,
            text,
            pieces,
            n,
            sources,
            t,
        )


class ReplyStep(Message):
    def __init__(self, job: ReplyJob, forward_s: float) -> None:
        super().__init__()
        self.job, self.forward_s = job, forward_s


class ReplyFinished(Message):
    def __init__(
        self, job: ReplyJob, text: str, finish_reason: str, stats: dict[str, Any], notice: str
    ) -> None:
        super().__init__()
        self.job, self.text, self.finish_reason, self.stats, self.notice = (
            job,
            text,
            finish_reason,
            stats,
            notice,
        )


class ReplyFailed(Message):
    def __init__(self, job: ReplyJob, error: str) -> None:
        super().__init__()
        self.job, self.error = job, error


class ModelProgress(Message):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ModelLoaded(Message):
    def __init__(
        self, lm: LoadedModel, generator: backend.Generator, source: str, device: str, warning: str
    ) -> None:
        super().__init__()
        self.lm, self.generator, self.source, self.device, self.warning = (
            lm,
            generator,
            source,
            device,
            warning,
        )


class ModelFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class StoreImported(Message):
    pass


class Notice(Message):
    """An error from a background thread, shown as a notification."""

    def __init__(self, text: str, title: str) -> None:
        super().__init__()
        self.text, self.title = text, title


class SamchatApp(App[None]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "samchat"
    BINDINGS: ClassVar[list[BindingType]] = _bindings()

    def __init__(
        self,
        *,
        db_path: Path | None = None,
        lm: LoadedModel | None = None,
        config: Config | None = None,
        config_path: Path | None = None,
        model_source: str | None = None,
        device: str | None = None,
        autoload_model: bool = True,
        theme_dirs: list[Path] | None = None,
        cost_curve: Any = None,
        model_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.config_path = config_path
        self.config_problem: str | None = None
        if config is None:
            try:
                config = load_config(config_path)
            except ConfigError as exc:
                self.config_problem = str(exc)
                config = Config()
        self.cfg = config
        self.db_path = db_path
        self.theme_dirs = theme_dirs
        self.cost_curve = cost_curve  # a known verification-cost curve (else measured once)
        self.model_options = dict(model_options or {})  # dtype, quantize, trust_remote_code
        self.data: backend.ChatData | None = None
        self.data_state = "none"  # opening | ready | failed
        self.chat_id: int | None = None
        self.lm: LoadedModel | None = lm
        self.generator: backend.Generator | None = None
        self.indexer: Any = None  # BackgroundIndexer of the loaded model's tokenizer
        self.model_source = model_source if model_source is not None else config.model
        self.device_name = device or config.device
        self.autoload_model = autoload_model
        self.model_state = "none"  # none | loading | ready | failed
        self.model_progress = ""
        self.job: ReplyJob | None = None  # the reply streaming now
        self.pending: ReplyJob | None = None  # a reply waiting for the model
        self.last_live: LiveStats | None = None
        self.replies_finished = 0  # replies fully handled (stored and shown)
        self.started_at = time.perf_counter()
        self.ready_at: float | None = None
        self.ready_cpu: float | None = None  # process CPU seconds when the UI became usable
        self.theme_problems: list[str] = []
        self._setup_themes()

    # -- layout --------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield Sidebar(id="sidebar")
            with Vertical(id="main"):
                yield ChatView(id="chat-view")
                yield Static(legend_content(), id="legend")
                yield StatsBar(id="stats-bar")
                yield PromptArea(
                    id="prompt",
                    placeholder="Message samchat (enter sends, shift+enter / ctrl+j new line)",
                )
                yield Static("", id="status")
        yield Footer()

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(PROVENANCE_DEFAULTS)

    def on_mount(self) -> None:
        for problem in self.theme_problems:
            self.notify(problem, severity="warning", title="Theme")
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self.cfg.keymap:
            self.set_keymap(self.cfg.keymap)
        if self.config_problem:
            self.notify(
                self.config_problem + " (using defaults)",
                severity="error",
                title="Config",
                timeout=10,
            )
        if "samchat.store" in sys.modules:
            self.open_data()
        else:  # importing sqlite-utils (and numpy) takes a while: not before the first frame
            self.data_state = "opening"
            self.import_store_worker()
        if self.lm is not None:
            indexer = self.indexer or self._make_indexer(self.lm)
            self._adopt_model(
                self.lm, backend.Generator(self.lm, self.cfg.decoding, indexer, self.cost_curve)
            )
        elif self.autoload_model:
            self.start_model_load(self.model_source, self.device_name)
        self.update_status()
        self.query_one("#prompt", PromptArea).focus()
        self.ready_at = time.perf_counter()
        self.ready_cpu = time.process_time()

    @work(thread=True, group="store", exit_on_error=False)
    def import_store_worker(self) -> None:
        import samchat.store  # noqa: F401

        self.post_message(StoreImported())

    def on_store_imported(self, _: StoreImported) -> None:
        self.open_data()

    def open_data(self) -> None:
        try:
            self.data = backend.ChatData.open(self.db_path)
            self.data_state = "ready"
        except SamchatError as exc:
            self.data_state = "failed"
            self.notify(
                f"{exc} (chats are not saved)", severity="error", title="Database", timeout=15
            )
        self.refresh_sidebar()
        if self.lm is not None and self.indexer is None and self.data is not None:
            self.indexer = self._make_indexer(self.lm)
            if self.generator is not None:
                self.generator.indexer = self.indexer

    def _setup_themes(self) -> None:
        """Before the first CSS pass: switching theme after mount restyles everything."""
        themes, self.theme_problems = load_themes(self.theme_dirs)
        for theme in themes:
            self.register_theme(theme)
        if self.cfg.theme in self.available_themes:
            self.theme = self.cfg.theme
        else:
            self.theme_problems.append(f"unknown theme {self.cfg.theme!r}; using the default")
            if "samchat-dark" in self.available_themes:
                self.theme = "samchat-dark"

    def _theme_changed(self, theme: Theme) -> None:
        if self.cfg.theme == theme.name:
            return
        self.cfg.theme = theme.name
        self.save_settings()

    def save_settings(self) -> None:
        try:
            save_config(self.cfg, self.config_path)
        except SamchatError as exc:
            self.notify(str(exc), severity="error", title="Config")

    # -- helpers -------------------------------------------------------------------------------

    @property
    def chat_view(self) -> ChatView:
        return self.query_one("#chat-view", ChatView)

    @property
    def prompt(self) -> PromptArea:
        return self.query_one("#prompt", PromptArea)

    @property
    def model_name(self) -> str:
        if self.lm is not None:
            return str(self.lm.name)
        return self.model_source or "SmolLM2-135M-Instruct"

    def error(self, exc: BaseException | str, title: str = "Error") -> None:
        self.notify(str(exc), severity="error", title=title, timeout=10)

    def need_data(self) -> backend.ChatData | None:
        if self.data is None:
            if self.data_state == "opening":
                self.notify("one moment: the database is opening", severity="warning")
            else:
                self.error("the database is not open; restart samchat after fixing it")
        return self.data

    def busy(self) -> bool:
        if self.job is not None or self.pending is not None:
            self.notify("a reply is in progress; press esc to stop it first", severity="warning")
            return True
        return False

    def update_status(self) -> None:
        parts = []
        if self.model_state == "ready" and self.lm is not None:
            parts.append(f"model {self.lm.name} ({self.lm.device})")
        elif self.model_state == "loading":
            parts.append(f"loading model… {self.model_progress}".rstrip())
        elif self.model_state == "failed":
            parts.append("model failed to load (ctrl+l to pick another)")
        else:
            parts.append("no model loaded (ctrl+l)")
        parts.append(f"method {self.cfg.decoding.get('method', 'sam+tr')}")
        if self.pending is not None:
            parts.append("your prompt waits for the model…")
        elif self.job is not None:
            parts.append("generating… (esc stops)")
        self.query_one("#status", Static).update(" · ".join(parts))

    def refresh_sidebar(self) -> None:
        sidebar = self.query_one(Sidebar)
        query = self.query_one("#search", Input).value.strip()
        if self.data is None:
            sidebar.show_chats([], None)
            return
        try:
            if query:
                sidebar.show_hits(self.data.search(query))
            else:
                sidebar.show_chats(self.data.chats(), self.chat_id)
        except SamchatError as exc:
            self.error(exc, "Search" if query else "Database")

    async def open_chat(
        self, chat_id: int | None, leaf_id: int | None = None, focus_id: int | None = None
    ) -> None:
        self.chat_id = chat_id
        view = self.chat_view
        if chat_id is None or self.data is None:
            await view.show_thread([], {})
            self.sub_title = ""
            return
        try:
            rows = self.data.thread(chat_id, leaf_id)
            branches = self.data.branches(rows)
            self.sub_title = self.data.chat(chat_id).title
        except SamchatError as exc:
            self.error(exc)
            return
        await view.show_thread(rows, branches)
        self.query_one(Sidebar).highlight(chat_id)
        if focus_id is not None:
            for mv in view.views():
                if mv.message_id == focus_id:
                    mv.focus()
                    mv.scroll_visible(animate=False)
                    break

    def current_rows(self) -> list[Any]:
        return self.chat_view.rows

    def target_view(self, role: str | None = None) -> MessageView | None:
        """The focused message if it fits, else the newest message of `role`."""
        focused = self.focused
        if isinstance(focused, MessageView) and (role is None or focused.role == role):
            return focused
        return self.chat_view.last_view(role)

    # -- sidebar and search --------------------------------------------------------------------

    @on(Input.Changed, "#search")
    def _search_changed(self) -> None:
        self.refresh_sidebar()

    @on(Input.Submitted, "#search")
    def _search_submitted(self) -> None:
        lst = self.query_one("#chat-list", OptionList)
        lst.focus()
        if lst.highlighted is None and lst.option_count:
            lst.highlighted = 0

    async def on_sidebar_chat_chosen(self, event: Sidebar.ChatChosen) -> None:
        if self.job is not None and event.chat_id != self.chat_id:
            self.notify("the reply keeps streaming into its own chat", timeout=3)
        await self.open_chat(event.chat_id, event.message_id, focus_id=event.message_id)
        if event.message_id is None:
            self.prompt.focus()

    @on(Button.Pressed, "#load-earlier")
    async def _load_earlier_pressed(self) -> None:
        await self.action_load_earlier()

    # -- sending and replies -------------------------------------------------------------------

    async def on_prompt_area_submitted(self, event: PromptArea.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.busy() or (data := self.need_data()) is None:
            return
        try:
            if self.chat_id is None:
                self.chat_id = data.create_chat(backend.title_from_prompt(text), self.model_name)
                self.sub_title = data.chat(self.chat_id).title
            rows = self.current_rows()
            parent = rows[-1].id if rows else None
            user_id = data.add_user(self.chat_id, text, parent)
            row = data.message(user_id)
        except SamchatError as exc:
            self.error(exc, "Database")
            return
        self.prompt.clear()
        await self.chat_view.add_view(self.chat_view.make_view(row), row)
        self.refresh_sidebar()
        await self.start_reply(user_id)

    async def start_reply(self, user_id: int) -> None:
        assert self.chat_id is not None
        view = MessageView(
            message_id=None, role="assistant", content="", model=self.model_name, parent_id=user_id
        )
        await self.chat_view.add_view(view)
        view.start_stream()
        job = ReplyJob(self.chat_id, user_id, view, LiveStats(time.perf_counter()), self.model_name)
        if self.generator is None:
            self.pending = job
            if self.model_state != "loading":
                self.notify(
                    "no model is loaded: ctrl+l picks one; the prompt waits", severity="warning"
                )
            self.update_status()
            return
        self.launch(job)

    def launch(self, job: ReplyJob) -> None:
        assert self.generator is not None and self.data is not None
        try:
            messages = self.data.conversation(job.chat_id, job.parent_id)
        except SamchatError as exc:
            self.error(exc)
            return
        job.live = LiveStats(time.perf_counter())
        job.model = self.generator.lm.name
        self.job = job
        self.update_status()
        self.run_reply(job, self.generator, messages, dict(self.cfg.sampling))

    @work(thread=True, group="reply", exit_on_error=False)
    def run_reply(
        self,
        job: ReplyJob,
        gen: backend.Generator,
        messages: list[dict[str, str]],
        sampling: dict[str, Any],
    ) -> None:
        try:
            from samchat.decoding.events import ReplyDone, StepStats, TextDelta

            for ev in gen.generate(messages, sampling, job.cancel):
                if isinstance(ev, TextDelta):
                    pieces = gen.pieces(list(ev.token_ids), list(ev.sources), ev.text)
                    self.post_message(
                        ReplyDelta(
                            job,
                            ev.text,
                            pieces,
                            len(ev.token_ids),
                            list(ev.sources),
                            time.perf_counter(),
                        )
                    )
                elif isinstance(ev, StepStats):
                    self.post_message(ReplyStep(job, ev.forward_s))
                elif isinstance(ev, ReplyDone):
                    self.post_message(
                        ReplyFinished(
                            job, ev.text, ev.finish_reason, stats_to_dict(ev.stats), ev.notice
                        )
                    )
                    return
            self.post_message(ReplyFailed(job, "the decoder stopped without finishing the reply"))
        except SamchatError as exc:
            self.post_message(ReplyFailed(job, str(exc)))
        except Exception as exc:  # a decoder bug must not take the UI down
            self.post_message(ReplyFailed(job, f"{type(exc).__name__}: {exc}"))

    async def on_reply_delta(self, msg: ReplyDelta) -> None:
        msg.job.live.on_delta(msg.n, msg.sources, msg.t)
        if msg.job.view.is_attached:
            await msg.job.view.append(msg.text, msg.pieces)
        self.query_one(StatsBar).show(msg.job.live, "streaming")

    def on_reply_step(self, msg: ReplyStep) -> None:
        msg.job.live.on_step(msg.forward_s)

    async def on_reply_finished(self, msg: ReplyFinished) -> None:
        job = msg.job
        if self.job is job:
            self.job = None
        job.live.on_done(msg.stats)
        view = job.view
        stats = dict(msg.stats)
        stats["finish_reason"] = msg.finish_reason
        stats["provenance"] = [[len(t), s] for t, s in view.spans]
        stats["speed_trace"] = [round(x, 2) for x in job.live.speeds[-SPARK_POINTS:]]
        if msg.notice:
            stats["notice"] = msg.notice
            self.notify(msg.notice, title="Context")
        text = msg.text
        if text != view.content:
            # The engine's final text is authoritative (e.g. a stop string trimmed).
            view.content = text
            view.spans = [[text, "plain"]] if not view.spans else view.spans
            if "".join(t for t, _ in view.spans) != text:
                view.spans = [[text, "plain"]]
                stats["provenance"] = [[len(text), "plain"]]
            if view.is_attached:
                view.query_one(".msg-body").update(text)  # type: ignore[attr-defined]
        message_id: int | None = None
        if self.data is not None:
            try:
                message_id = self.data.add_reply(
                    job.chat_id, text, job.parent_id, job.model, stats, msg.finish_reason
                )
            except SamchatError as exc:
                self.error(exc, "Database")
        if view.is_attached:
            await view.finish(message_id, stats)
            if message_id is not None and self.data is not None and self.chat_id == job.chat_id:
                row = self.data.message(message_id)
                self.chat_view.rows.append(row)
                self._refresh_branch_headers()
        self.query_one(StatsBar).show(job.live, msg.finish_reason)
        if msg.finish_reason == "cancelled":
            self.notify("stopped", timeout=2)
        self.refresh_sidebar()
        self.update_status()
        self.last_live = job.live
        self.replies_finished += 1

    def _refresh_branch_headers(self) -> None:
        if self.data is None:
            return
        try:
            branches = self.data.branches(self.chat_view.rows)
        except SamchatError:
            return
        self.chat_view.branches = branches
        for view in self.chat_view.views():
            if view.message_id is not None:
                view.branch = branches.get(view.message_id, (1, 1))
                view.query_one(".msg-header", Static).update(view.header_text())

    async def on_reply_failed(self, msg: ReplyFailed) -> None:
        if self.job is msg.job:
            self.job = None
        if msg.job.view.is_attached:
            await msg.job.view.finish(None, {})
            await msg.job.view.remove()
        self.error(msg.error, "Generation failed")
        self.update_status()

    # -- model loading -------------------------------------------------------------------------

    def start_model_load(self, source: str, device: str) -> None:
        self.model_state = "loading"
        self.model_progress = ""
        self.update_status()
        self.load_model_worker(source, device, dict(self.cfg.decoding))

    @work(thread=True, exclusive=True, group="model", exit_on_error=False)
    def load_model_worker(self, source: str, device: str, decoding: dict[str, Any]) -> None:
        def progress(text: str) -> None:
            self.post_message(ModelProgress(text))

        try:
            lm = backend.load_lm(source, device, progress, self.model_options)
        except SamchatError as exc:
            self.post_message(ModelFailed(str(exc)))
            return
        except Exception as exc:
            self.post_message(ModelFailed(f"could not load the model: {type(exc).__name__}: {exc}"))
            return
        indexer = self._make_indexer(lm)
        generator = backend.Generator(lm, decoding, indexer, self.cost_curve)
        warning = ""
        try:
            self.post_message(ModelProgress("preparing the decoder (timing this device once)"))
            generator.prepare()
        except Exception as exc:  # the next reply reports it again; the model itself is fine
            warning = f"decoder setup failed: {exc}"
        self.post_message(ModelLoaded(lm, generator, source, device, warning))

    def on_model_progress(self, msg: ModelProgress) -> None:
        self.model_progress = msg.text
        self.update_status()

    def on_model_loaded(self, msg: ModelLoaded) -> None:
        self._adopt_model(msg.lm, msg.generator)
        self.notify(f"model {msg.lm.name} ready", timeout=3)
        if msg.warning:
            self.error(msg.warning, "Decoder")
        if msg.source != self.cfg.model or msg.device != self.cfg.device:
            self.cfg.model, self.cfg.device = msg.source, msg.device
            self.save_settings()

    def _make_indexer(self, lm: LoadedModel) -> Any:
        """Keeps the static index in step with the store (own thread, own connection)."""
        if self.data is None:
            return None

        def failed(exc: Exception) -> None:  # runs in the indexer's thread
            self.post_message(Notice(f"static index: {exc}", "Index"))

        try:
            return backend.start_indexer(lm, self.data.path, failed)
        except Exception as exc:  # decoding still works without the static index
            self.post_message(Notice(f"static index unavailable: {exc}", "Index"))
            return None

    def on_notice(self, msg: Notice) -> None:
        self.error(msg.text, msg.title)

    def poke_indexer(self) -> None:
        if self.indexer is not None:
            self.indexer.poke()

    def on_unmount(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
        if self.indexer is not None:
            self.indexer.stop(timeout=2)

    def _adopt_model(self, lm: LoadedModel, generator: backend.Generator) -> None:
        if self.indexer is not None and self.indexer is not generator.indexer:
            self.indexer.stop(timeout=2)
        self.lm = lm
        self.generator = generator
        self.indexer = generator.indexer
        self.model_state = "ready"
        self.update_status()
        if self.pending is not None:
            job, self.pending = self.pending, None
            self.launch(job)

    def on_model_failed(self, msg: ModelFailed) -> None:
        self.model_state = "failed" if self.lm is None else "ready"
        self.error(msg.error, "Model")
        self.update_status()

    # -- actions -------------------------------------------------------------------------------

    def action_help(self) -> None:
        keymap = self.cfg.keymap
        rows = [
            (keymap.get(binding_id(a), key), desc, binding_id(a)) for a, key, desc, _ in ACTIONS
        ]
        self.push_screen(HelpScreen(rows))

    async def action_new_chat(self) -> None:
        await self.open_chat(None)
        self.query_one("#search", Input).value = ""
        self.refresh_sidebar()
        self.prompt.focus()

    def action_search(self) -> None:
        self.query_one("#search", Input).focus()

    def action_rename_chat(self) -> None:
        if self.chat_id is None or (data := self.need_data()) is None:
            self.notify("open a chat first", severity="warning")
            return
        chat_id = self.chat_id

        def done(title: str | None) -> None:
            if not title or not title.strip():
                return
            try:
                data.rename_chat(chat_id, title.strip())
            except SamchatError as exc:
                self.error(exc, "Rename")
                return
            if self.chat_id == chat_id:
                self.sub_title = title.strip()
            self.refresh_sidebar()

        self.push_screen(InputScreen("Rename chat", data.chat(chat_id).title), done)

    def action_delete_chat(self) -> None:
        if self.chat_id is None or (data := self.need_data()) is None:
            self.notify("open a chat first", severity="warning")
            return
        if self.busy():
            return
        chat_id = self.chat_id

        async def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                data.delete_chat(chat_id)
            except SamchatError as exc:
                self.error(exc, "Delete")
                return
            if self.chat_id == chat_id:
                await self.open_chat(None)
            self.refresh_sidebar()
            self.poke_indexer()
            self.notify("chat deleted", timeout=2)

        title = data.chat(chat_id).title
        self.push_screen(ConfirmScreen(f"Delete the chat “{title}” and all its messages?"), done)

    def action_system_prompt(self) -> None:
        if (data := self.need_data()) is None:
            return
        try:
            if self.chat_id is None:
                self.chat_id = data.create_chat("New chat", self.model_name)
                self.refresh_sidebar()
            chat = data.chat(self.chat_id)
        except SamchatError as exc:
            self.error(exc)
            return

        def done(text: str | None) -> None:
            if text is None:
                return
            try:
                data.set_system_prompt(chat.id, text.strip() or None)
            except SamchatError as exc:
                self.error(exc)
                return
            self.notify(
                "system prompt saved" if text.strip() else "system prompt cleared", timeout=2
            )

        self.push_screen(
            EditorScreen(f"System prompt for “{chat.title}”", chat.system_prompt or ""), done
        )

    def action_stop(self) -> None:
        if self.job is not None:
            self.job.cancel.set()
            return
        if self.pending is not None:
            job, self.pending = self.pending, None
            self.call_later(self._drop_pending, job)

    async def _drop_pending(self, job: ReplyJob) -> None:
        if job.view.is_attached:
            await job.view.finish(None, {})
            await job.view.remove()
        self.notify("the waiting prompt will not be answered", timeout=3)
        self.update_status()

    async def action_regenerate(self) -> None:
        if self.busy() or self.chat_id is None or self.data is None:
            return
        view = self.target_view("assistant")
        rows = self.current_rows()
        if view is not None and view.parent_id is not None:
            user_id = view.parent_id
        else:  # no reply yet (e.g. it failed): answer the last user message
            users = [r for r in rows if r.role == "user"]
            if not users:
                self.notify("nothing to regenerate yet", severity="warning")
                return
            user_id = users[-1].id
        ids = [r.id for r in rows]
        upto = rows[: ids.index(user_id) + 1] if user_id in ids else rows
        await self.chat_view.show_thread(upto, self.data.branches(upto))
        await self.start_reply(user_id)

    def action_edit_message(self) -> None:
        if self.busy() or self.chat_id is None or (data := self.need_data()) is None:
            return
        view = self.target_view("user")
        focused = self.focused
        if isinstance(focused, MessageView) and focused.role == "assistant":
            view = next(
                (v for v in self.chat_view.views() if v.message_id == focused.parent_id), view
            )
        if view is None or view.message_id is None:
            self.notify("there is no message of yours to edit", severity="warning")
            return
        original = data.message(view.message_id)
        chat_id = self.chat_id

        async def done(text: str | None) -> None:
            if text is None or not text.strip() or self.chat_id != chat_id:
                return
            try:
                new_id = data.add_user(chat_id, text.strip(), original.parent_id)
            except SamchatError as exc:
                self.error(exc, "Database")
                return
            await self.open_chat(chat_id, new_id)
            await self.start_reply(new_id)

        self.push_screen(
            EditorScreen("Edit and resend (makes a new branch)", original.content, accept="Resend"),
            done,
        )

    async def _switch_branch(self, step: int) -> None:
        if self.busy() or self.chat_id is None or self.data is None:
            return
        focused = self.focused
        candidates = [focused] if isinstance(focused, MessageView) else []
        candidates += [v for v in reversed(self.chat_view.views()) if v.branch[1] > 1]
        for view in candidates:
            if view.message_id is None:
                continue
            try:
                target = self.data.sibling(view.message_id, step)
            except SamchatError as exc:
                self.error(exc)
                return
            if target is not None:
                await self.open_chat(self.chat_id, target, focus_id=target)
                return
        self.notify("this message has no other branches", severity="warning")

    async def action_branch_prev(self) -> None:
        await self._switch_branch(-1)

    async def action_branch_next(self) -> None:
        await self._switch_branch(1)

    def action_copy_message(self) -> None:
        view = self.target_view()
        if view is None or not view.content:
            self.notify("no message to copy", severity="warning")
            return
        self.copy_to_clipboard(view.content)
        self.notify(f"copied {len(view.content)} characters", timeout=2)

    def action_copy_code(self) -> None:
        focused = self.focused
        views = [focused] if isinstance(focused, MessageView) else []
        views += list(reversed(self.chat_view.views()))
        for view in views:
            blocks = code_blocks(view.content)
            if not blocks:
                continue
            if len(blocks) == 1:
                self._copy_block(blocks[0])
                return

            def chosen(index: int | None, blocks: list[str] = blocks) -> None:
                if index is not None:
                    self._copy_block(blocks[index])

            labels = [
                f"{i + 1}: {b.splitlines()[0] if b.strip() else '(empty)'}"[:70]
                for i, b in enumerate(blocks)
            ]
            self.push_screen(PickScreen("Copy which code block?", labels), chosen)
            return
        self.notify("no code block to copy", severity="warning")

    def _copy_block(self, block: str) -> None:
        self.copy_to_clipboard(block)
        self.notify(f"copied a code block ({len(block.splitlines())} lines)", timeout=2)

    def action_toggle_provenance(self) -> None:
        on_now = not self.chat_view.has_class("-provenance")
        self.chat_view.set_class(on_now, "-provenance")
        self.query_one("#legend").display = on_now

    def action_toggle_stats(self) -> None:
        self.chat_view.toggle_class("-show-stats")

    async def _step_message(self, step: int) -> None:
        views = self.chat_view.views()
        if not views:
            return
        focused = self.focused
        if not isinstance(focused, MessageView) or focused not in views:
            index = len(views) if step < 0 else -1  # from the prompt: start at the newest
        else:
            index = views.index(focused)
        target = index + step
        if target < 0:
            if await self.chat_view.load_earlier():
                views = self.chat_view.views()
                target = views.index(focused) - 1 if isinstance(focused, MessageView) else 0
            else:
                target = 0
        if target >= len(views):
            self.prompt.focus()
            return
        views[target].focus()
        views[target].scroll_visible(animate=False)

    async def action_message_up(self) -> None:
        await self._step_message(-1)

    async def action_message_down(self) -> None:
        await self._step_message(1)

    def on_message_view_focused(self, event: MessageView.Focused) -> None:
        """A finished reply shows its stored figures (and speed trace) in the stats bar."""
        view = event.view
        if self.job is not None or view.role != "assistant" or not view.stats:
            return
        live = LiveStats(0.0)
        live.tokens = int(view.stats.get("tokens") or 0)
        live.speeds = [float(x) for x in view.stats.get("speed_trace") or []]
        live.on_done(view.stats)
        self.query_one(StatsBar).show(live, f"{view.stats.get('finish_reason', '')} (stored)")

    async def action_load_earlier(self) -> None:
        added = await self.chat_view.load_earlier()
        if not added:
            self.notify("this is the start of the chat", timeout=2)

    def action_pick_model(self) -> None:
        if self.job is not None:  # a waiting prompt is fine: it goes to the new model
            self.notify("a reply is streaming; press esc to stop it first", severity="warning")
            return

        def done(choice: tuple[str, str] | None) -> None:
            if choice is None:
                return
            source, device = choice
            if self.model_state == "loading":
                self.notify("a model is already loading", severity="warning")
                return
            self.start_model_load(source, device)

        recent = [self.cfg.model] if self.cfg.model else []
        self.push_screen(ModelScreen(self.model_source, self.device_name, recent), done)

    def action_import_documents(self) -> None:
        data = self.need_data()
        if data is None:
            return
        store_path = data.path

        def importer(path: str, progress: Any) -> str:
            return backend.import_documents(path, store_path, progress)

        def closed(summary: str | None) -> None:
            self.poke_indexer()
            self.refresh_sidebar()  # imported ChatGPT exports become chats

        self.push_screen(ImportScreen(importer), closed)

    def action_settings(self) -> None:
        def done(result: tuple[dict[str, Any], dict[str, Any]] | None) -> None:
            if result is None:
                return
            decoding, sampling = result
            changed = decoding != self.cfg.decoding
            self.cfg.decoding, self.cfg.sampling = decoding, sampling
            self.save_settings()
            if changed and self.lm is not None:
                # A new session: the next reply (in its worker) builds it with the new knobs.
                self.generator = backend.Generator(self.lm, decoding, self.indexer, self.cost_curve)
            self.update_status()
            self.notify("settings saved", timeout=2)

        self.push_screen(SettingsScreen(self.cfg.decoding, self.cfg.sampling), done)

    def action_pick_theme(self) -> None:
        self.search_themes()

    # -- command palette -----------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        keymap = self.cfg.keymap
        for action, key, desc, _ in ACTIONS:
            if action == "pick_theme":
                continue  # textual's own "Theme" command does this
            shown = keymap.get(binding_id(action), key)
            yield SystemCommand(desc, f"{desc} ({shown})", partial(self.run_action, action))


def code_blocks(markdown: str) -> list[str]:
    """Fenced and indented code blocks of a Markdown text, in order."""
    if "```" not in markdown and "~~~" not in markdown and "    " not in markdown:
        return []
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(markdown)
    return [t.content for t in tokens if t.type in ("fence", "code_block")]
