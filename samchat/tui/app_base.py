"""State, layout and helpers shared by the app's parts (no actions here)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import on
from textual.app import App, ComposeResult
from textual.containers import Horizontal, Vertical
from textual.theme import Theme
from textual.widgets import Button, Footer, Input, OptionList, Static

from samchat.chat import backend
from samchat.chat.config import Config, ConfigError, load_config, save_config
from samchat.chat.live_stats import LiveStats
from samchat.errors import SamchatError
from samchat.tui.chat_view import ChatView
from samchat.tui.documents_screen import ChatDocuments
from samchat.tui.guard import guarded
from samchat.tui.messages import MessageView, legend_content
from samchat.tui.prompt import PromptArea
from samchat.tui.sidebar import Sidebar
from samchat.tui.stats_bar import StatsBar
from samchat.tui.themes import PROVENANCE_DEFAULTS, load_themes
from samchat.tui.worker_messages import (
    ReplyJob,
)

if TYPE_CHECKING:
    from samchat.models.loader import LoadedModel


class SamchatBase(App[None]):
    """The widgets, the state and the small helpers every part of the app uses."""

    def __init__(
        self,
        *,
        db_path: Path | None = None,
        lm: LoadedModel | None = None,
        config: Config | None = None,
        config_path: Path | None = None,
        model_source: str | None = None,
        device: str | None = None,
        engine: str | None = None,
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
        self.data_state = "none"  # ready | failed
        self.chat_id: int | None = None
        self.lm: LoadedModel | None = lm
        self.generator: backend.Generator | None = None
        self.indexer: Any = None  # BackgroundIndexer of the loaded model's tokenizer
        self.model_source = model_source if model_source is not None else config.model
        self.device_name = device or config.device
        self.engine_name = engine or config.engine  # --engine, else config.toml, else auto
        self.autoload_model = autoload_model
        self.model_state = "none"  # none | loading | ready | failed
        self.model_progress = ""
        self.index_progress = ""  # e.g. "indexing 3/40" while the static index syncs
        self.job: ReplyJob | None = None  # the reply streaming now
        self.pending: ReplyJob | None = None  # a reply waiting for the model
        # Retrieval and attached files per chat (None: the chat not created yet).
        self.chat_documents: dict[int | None, ChatDocuments] = {}
        self.preparing = False  # a question's documents are being read and fitted
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
        if self.config_problem:
            # The file did not load: writing would replace the user's theme, keymap and model
            # with the defaults in use. They fix the file; we keep our hands off it.
            self.notify(f"{self.config_problem}: not saving settings over it", severity="warning")
            return
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
            self.error("the database is not open; restart samchat after fixing it")
        return self.data

    @property
    def documents(self) -> ChatDocuments:
        return self.chat_documents.setdefault(self.chat_id, ChatDocuments())

    def busy(self) -> bool:
        if self.job is not None or self.pending is not None or self.preparing:
            self.notify("a reply is in progress; press esc to stop it first", severity="warning")
            return True
        return False

    def update_status(self) -> None:
        parts = []
        if self.model_state == "ready" and self.lm is not None:
            runs = " ".join(p for p in (self.lm.engine, self.lm.dtype) if p)
            parts.append(f"model {self.lm.name} ({runs}, {self.lm.device})")
        elif self.model_state == "loading":
            parts.append(f"loading model… {self.model_progress}".rstrip())
        elif self.model_state == "failed":
            parts.append("model failed to load (ctrl+l to pick another)")
        else:
            parts.append("no model loaded (ctrl+l)")
        parts.append(f"method {self.cfg.decoding.get('method', 'sam+tr')}")
        if self.documents.active:
            parts.append(self.documents.summary())
        if self.index_progress:
            parts.append(self.index_progress)
        if self.preparing:
            parts.append("reading documents…")
        elif self.pending is not None:
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
        self.chat_documents.pop(None, None)  # a new chat starts without documents
        self.update_status()
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

    @guarded
    async def on_sidebar_chat_chosen(self, event: Sidebar.ChatChosen) -> None:
        if self.job is not None and event.chat_id != self.chat_id:
            self.notify("the reply keeps streaming into its own chat", timeout=3)
        await self.open_chat(event.chat_id, event.message_id, focus_id=event.message_id)
        if event.message_id is None:
            self.prompt.focus()

    @on(Button.Pressed, "#load-earlier")
    async def _load_earlier_pressed(self) -> None:
        await self.chat_view.load_earlier()
