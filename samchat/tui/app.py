"""The samchat Textual app: themes, settings, the keymap and command palette, the store and
model loading. The chat itself, and every action on it, is the ChatScreen's."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import App, SystemCommand
from textual.binding import BindingType
from textual.screen import Screen
from textual.theme import Theme
from textual.worker import get_current_worker

from samchat.chat.config import Config, UserSettings
from samchat.chat.generator import make_generator
from samchat.chat.service import ChatService
from samchat.engines.engine_thread import ENGINE_THREAD
from samchat.errors import SamchatError
from samchat.models.default import DEFAULT_MODEL_NAME
from samchat.models.loader import ModelSpec
from samchat.tui import model_loading
from samchat.tui.guard import guarded
from samchat.tui.keys import ACTIONS, app_bindings, binding_id, palette_commands
from samchat.tui.screens.chat import ChatScreen
from samchat.tui.screens.help import HelpScreen
from samchat.tui.screens.model import ModelScreen
from samchat.tui.screens.settings import SettingsScreen
from samchat.tui.states import DataState, ModelState
from samchat.tui.themes import PROVENANCE_DEFAULTS, install_themes
from samchat.tui.worker_messages import (
    EngineSwitch,
    IndexProgress,
    ModelFailed,
    ModelLoaded,
    ModelProgress,
    Notice,
)

if TYPE_CHECKING:
    from rich.console import RenderableType

    from samchat.chat.generator import Replies
    from samchat.chat.opening import Model
    from samchat.corpus.indexing import BackgroundIndexer
    from samchat.decoding.params import DecodingConfig, SamplingParams
    from samchat.engines.costs.curve import CostCurve
    from samchat.store import Store


QUIT_WAIT_S = 0.5  # at quit, for the indexer thread to finish its step


class SamchatApp(App[None]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses live elsewhere
    TITLE = "samchat"
    BINDINGS: ClassVar[list[BindingType]] = app_bindings()

    def __init__(
        self,
        *,
        db_path: Path | None = None,
        lm: Model | None = None,
        config: Config | None = None,
        config_path: Path | None = None,
        spec: ModelSpec | None = None,
        autoload_model: bool = True,
        theme_dirs: list[Path] | None = None,
        cost_curve: CostCurve | None = None,
        cache_dir: Path | None = None,
    ) -> None:
        """spec: the model to load (`cli_options.spec_from_args`); none: config.toml's."""
        super().__init__()
        self.settings = UserSettings(config_path, config)
        self.cfg = self.settings.cfg
        self.db_path = db_path
        self.theme_dirs = theme_dirs
        self.cost_curve = cost_curve  # a known verification-cost curve (else measured once)
        self.cache_dir = cache_dir  # measured costs and Token Recycling's table (None: not kept)
        self.data: Store | None = None
        self.service: ChatService | None = None  # the turns of a chat, over `data`
        self.data_state = DataState.NONE
        self.lm: Model | None = lm
        self.generator: Replies | None = None
        self.indexer: BackgroundIndexer | None = None  # the loaded model's static index
        # The model as the user named it or picked it (engine and format may be left to auto,
        # resolved at each load): the model screen starts from it.
        self.spec = spec if spec is not None else self.cfg.model_spec()
        self.autoload_model = autoload_model
        self.model_state = ModelState.NONE
        self.model_progress = ""
        self.index_progress = ""  # e.g. "indexing 3/40" while the static index syncs
        self.started_at = time.perf_counter()
        self.ready_at: float | None = None
        self.ready_cpu: float | None = None  # process CPU seconds when the UI became usable
        # Before the first CSS pass: switching theme after mount restyles everything.
        self.theme_problems = install_themes(self, self.cfg.theme, self.theme_dirs)
        self.chat = ChatScreen(self)

    def get_default_screen(self) -> ChatScreen:
        return self.chat

    # -- themes and settings -------------------------------------------------------------------

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(PROVENANCE_DEFAULTS)

    def _theme_changed(self, theme: Theme) -> None:
        if self.cfg.theme == theme.name:
            return
        self.cfg.theme = theme.name
        self.save_settings()

    def save_settings(self) -> None:
        try:
            self.settings.save()
        except SamchatError as exc:
            if self.settings.problem:  # the file did not load: the user fixes it, not us
                self.notify(str(exc), severity="warning", title="Config")
            else:
                self.notify(str(exc), severity="error", title="Config")

    # -- helpers -------------------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        if self.lm is not None:
            return str(self.lm.name)
        return self.spec.source or DEFAULT_MODEL_NAME

    def error(self, exc: BaseException | str, title: str = "Error") -> None:
        self.notify(str(exc), severity="error", title=title, timeout=10)

    def need_data(self) -> Store | None:
        if self.data is None:
            self.error("the database is not open; restart samchat after fixing it")
        return self.data

    def ui_ready(self) -> None:
        """The chat screen is up: the UI is usable from now on."""
        self.ready_at = time.perf_counter()
        self.ready_cpu = time.process_time()

    # -- start-up and the store ----------------------------------------------------------------

    def on_mount(self) -> None:
        for problem in self.theme_problems:
            self.notify(problem, severity="warning", title="Theme")
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self.cfg.keymap:
            self.set_keymap(self.cfg.keymap)
        if self.settings.problem:
            self.notify(
                self.settings.problem + " (using defaults)",
                severity="error",
                title="Config",
                timeout=10,
            )
        # Opening an up-to-date database is a few SQLite reads (sqlite-utils is imported only
        # when a migration runs: the very first start); a failure is a notice.
        self.open_data()
        if self.lm is not None:
            indexer = self.indexer or self._make_indexer(self.lm)
            generator = self._generator(self.lm, self.cfg.decoding, indexer)
            self._adopt_model(self.lm, generator, indexer)
        elif self.autoload_model:
            self.start_model_load(self.spec, picked=False)

    @property
    def recent_models(self) -> Path:
        """The list of GGUF files loaded before, in this app's data directory."""
        from samchat.models.catalog import recent_file

        return recent_file((self.db_path or _default_db()).parent)

    def open_data(self) -> None:
        from samchat.store import Store

        try:
            self.data = Store.open(self.db_path or _default_db())
            self.service = ChatService(self.data)
            self.data_state = DataState.READY
        except SamchatError as exc:
            self.data_state = DataState.FAILED
            self.notify(
                f"{exc} (chats are not saved)", severity="error", title="Database", timeout=15
            )
        self.chat.refresh_sidebar()
        if self.lm is not None and self.indexer is None and self.data is not None:
            self.indexer = self._make_indexer(self.lm)
            if self.generator is not None:
                self.generator.indexer = self.indexer

    def exit(
        self, result: None = None, return_code: int = 0, message: RenderableType | None = None
    ) -> None:
        """Quit at once: reply and timing stop before Textual waits for the workers' threads."""
        self.chat.conversation.replies.stop_all()
        super().exit(result, return_code, message)

    def on_unmount(self) -> None:
        self.chat.conversation.replies.stop_all()
        if self.indexer is not None:
            # It stops at its next step, never halfway (a sync is one transaction).
            self.indexer.stop(timeout=QUIT_WAIT_S)

    # -- model loading -------------------------------------------------------------------------

    def start_model_load(self, spec: ModelSpec, *, picked: bool) -> None:
        """picked: the user chose spec on the model screen, so config.toml keeps it once it
        loads; a start-up load writes nothing."""
        self.model_state = ModelState.LOADING
        self.model_progress = ""
        self.chat.update_status()
        # A copy: the worker's session keeps these knobs, whatever the settings do meanwhile.
        self.load_model_worker(spec, picked, dataclasses.replace(self.cfg.decoding))

    @work(thread=True, exclusive=True, group="model", exit_on_error=False)
    def load_model_worker(self, spec: ModelSpec, picked: bool, decoding: DecodingConfig) -> None:
        """On the process's engine thread, where replies decode (engine_thread.py says why)."""
        worker = get_current_worker()
        ENGINE_THREAD.run(
            partial(
                model_loading.load,
                self.post_message,
                spec,
                picked,
                decoding,
                cache_dir=self.cache_dir,
                cost_curve=self.cost_curve,
                endpoints=self.cfg.endpoints,
                recent=self.recent_models,
                db_path=self.data.path if self.data is not None else None,
                cancelled=lambda: worker.is_cancelled,
            )
        )

    def on_model_progress(self, msg: ModelProgress) -> None:
        self.model_progress = msg.text
        self.chat.update_status()

    @guarded
    def on_model_loaded(self, msg: ModelLoaded) -> None:
        self._adopt_model(msg.lm, msg.generator, msg.indexer)
        self.notify(f"model {msg.lm.name} ready", timeout=3)
        if msg.warning:
            self.error(msg.warning, "Decoder")
        # The model screen opens on what the user asked for.
        self.spec = msg.spec
        if msg.picked:
            spec = msg.spec
            self.cfg.model, self.cfg.device = spec.source or "", spec.device
            self.cfg.engine, self.cfg.dtype = spec.engine, spec.dtype
            self.save_settings()

    def on_engine_switch(self, msg: EngineSwitch) -> None:
        self._adopt_model(msg.generator.lm, msg.generator, self.indexer)
        self.notify(msg.notice, title="Engine", timeout=8)

    def on_model_failed(self, msg: ModelFailed) -> None:
        self.model_state = ModelState.FAILED if self.lm is None else ModelState.READY
        self.error(msg.error, "Model")
        self.chat.update_status()

    def _adopt_model(
        self, lm: Model, generator: Replies, indexer: BackgroundIndexer | None
    ) -> None:
        if self.indexer is not None and self.indexer is not indexer:
            self.indexer.stop(timeout=2)
        self.lm = lm
        self.generator = generator
        self.indexer = indexer
        self.model_state = ModelState.READY
        self.chat.model_ready()

    def _generator(
        self, lm: Model, decoding: DecodingConfig, indexer: BackgroundIndexer | None
    ) -> Replies:
        """Replies of lm on the kept cost curve (none kept: plain, then the machine is timed)."""
        return make_generator(
            lm, decoding, indexer, self.cost_curve, self.cache_dir, measure_first=False
        )

    def _make_indexer(self, lm: Model) -> BackgroundIndexer | None:
        db_path = self.data.path if self.data is not None else None
        return model_loading.start_static_indexer(self.post_message, lm, db_path)

    def on_index_progress(self, msg: IndexProgress) -> None:
        busy = msg.total > 0 and msg.done < msg.total
        self.index_progress = f"indexing {msg.done}/{msg.total}" if busy else ""
        self.chat.update_status()

    def on_notice(self, msg: Notice) -> None:
        self.error(msg.text, msg.title)

    def poke_indexer(self) -> None:
        if self.indexer is not None:
            self.indexer.poke()

    # -- the app's own actions -----------------------------------------------------------------

    @guarded
    def action_help(self) -> None:
        keymap = self.cfg.keymap
        rows = [
            (keymap.get(binding_id(a), key), desc, binding_id(a)) for a, key, desc, _ in ACTIONS
        ]
        self.push_screen(HelpScreen(rows))

    @guarded
    def action_pick_model(self) -> None:
        if self.chat.conversation.replies.job is not None:  # a waiting prompt goes to the new model
            self.notify("a reply is streaming; press esc to stop it first", severity="warning")
            return

        def done(choice: ModelSpec | None) -> None:
            if choice is None:
                return
            if self.model_state == ModelState.LOADING:
                self.notify("a model is already loading", severity="warning")
                return
            self.start_model_load(choice, picked=True)

        recent = [self.cfg.model] if self.cfg.model else []
        screen = ModelScreen(self.spec, recent, self.recent_models, self.cfg.endpoints)
        self.push_screen(screen, done)

    @guarded
    def action_settings(self) -> None:
        def done(result: tuple[DecodingConfig, SamplingParams] | None) -> None:
            if result is None:
                return
            decoding, sampling = result
            changed = decoding != self.cfg.decoding
            self.cfg.decoding, self.cfg.sampling = decoding, sampling
            self.save_settings()
            if changed and self.lm is not None:
                # A new session: the next reply (in its worker) builds it with the new knobs.
                self.generator = self._generator(self.lm, decoding, self.indexer)
            self.chat.update_status()
            self.notify("settings saved", timeout=2)

        self.push_screen(SettingsScreen(self.cfg.decoding, self.cfg.sampling), done)

    @guarded
    def action_pick_theme(self) -> None:
        self.search_themes()

    # -- command palette -----------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield from palette_commands(self, self.chat, self.cfg.keymap)


def _default_db() -> Path:
    """The database of the default data directory (launch.py passes the resolved one)."""
    from samchat import paths
    from samchat.store import DB_NAME

    return paths.data_dir() / DB_NAME
