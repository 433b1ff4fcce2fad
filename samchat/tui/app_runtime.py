"""Start-up, the store, model loading and streaming replies (workers post back here)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from textual import work
from textual.widgets import Static

from samchat.chat import backend
from samchat.chat.live_stats import LiveStats
from samchat.errors import SamchatError
from samchat.tui.app_base import SamchatBase
from samchat.tui.documents_screen import ChatDocuments
from samchat.tui.guard import guarded
from samchat.tui.messages import MessageView
from samchat.tui.prompt import PromptArea
from samchat.tui.stats_bar import StatsBar
from samchat.tui.worker_messages import (
    IndexProgress,
    ModelFailed,
    ModelLoaded,
    ModelProgress,
    Notice,
    ReplyDelta,
    ReplyFailed,
    ReplyFinished,
    ReplyJob,
    ReplyStep,
    SourcesFailed,
    SourcesReady,
)

if TYPE_CHECKING:
    from samchat.models.loader import LoadedModel


class SamchatRuntime(SamchatBase):
    """Opens the store at mount, loads models and streams replies in workers."""

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
        # Opening an up-to-date database is a few SQLite reads (sqlite-utils is imported only
        # when a migration runs: the very first start); a failure is a notice.
        self.open_data()
        if self.lm is not None:
            indexer = self.indexer or self._make_indexer(self.lm)
            self._adopt_model(
                self.lm, backend.Generator(self.lm, self.cfg.decoding, indexer, self.cost_curve)
            )
        elif self.autoload_model:
            self.start_model_load(self.model_source, self.device_name, self.engine_name)
        self.update_status()
        self.query_one("#prompt", PromptArea).focus()
        self.ready_at = time.perf_counter()
        self.ready_cpu = time.process_time()

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

    # -- sending and replies -------------------------------------------------------------------

    @guarded
    async def on_prompt_area_submitted(self, event: PromptArea.Submitted) -> None:
        text = event.text.strip()
        if not text:
            return
        if self.busy() or (data := self.need_data()) is None:
            return
        docs = self.documents
        if not docs.active:
            await self.send(text, text)
            return
        if self.generator is None:
            self.notify(
                "load a model first (ctrl+l): documents are fitted to its context",
                severity="warning",
            )
            return
        try:
            history = self._history(data)
        except SamchatError as exc:
            self.error(exc, "Database")
            return
        self.preparing = True
        self.prompt.clear()
        self.update_status()
        self.prepare_sources(
            self.chat_id, text, history, docs.retrieval, list(docs.files), self.generator
        )

    def _history(self, data: backend.ChatData) -> list[dict[str, str]]:
        """The messages the question will follow (what the sources must fit beside)."""
        if self.chat_id is None:
            return []
        rows = self.current_rows()
        if not rows:
            chat = data.chat(self.chat_id)
            return [{"role": "system", "content": chat.system_prompt}] if chat.system_prompt else []
        return data.conversation(self.chat_id, rows[-1].id)

    @work(thread=True, group="sources", exit_on_error=False)
    def prepare_sources(
        self,
        chat_id: int | None,
        question: str,
        history: list[dict[str, str]],
        retrieval: bool,
        files: list[Any],
        gen: backend.Generator,
    ) -> None:
        assert self.data is not None
        try:
            sources = backend.gather_sources(
                self.data.path, question, retrieval=retrieval, files=files
            )
            fitted = gen.fit_sources(history, question, sources, dict(self.cfg.sampling))
        except SamchatError as exc:
            self.post_message(SourcesFailed(question, str(exc)))
        except Exception as exc:  # never take the UI down over a document
            self.post_message(SourcesFailed(question, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(SourcesReady(chat_id, question, fitted))

    @guarded
    async def on_sources_ready(self, msg: SourcesReady) -> None:
        self.preparing = False
        fitted = msg.fitted
        for notice in fitted.notices:
            self.notify(notice, title="Documents", severity="warning", timeout=8)
        if not fitted.sources:
            self.notify("no document passage matches; asking without them", title="Documents")
        if self.chat_id != msg.chat_id:  # the user moved to another chat meanwhile
            await self.open_chat(msg.chat_id)
        await self.send(msg.question, fitted.content, [s.record() for s in fitted.sources])

    def on_sources_failed(self, msg: SourcesFailed) -> None:
        self.preparing = False
        if not self.prompt.text.strip():
            self.prompt.load_text(msg.question)  # nothing was sent: the question comes back
        self.error(msg.error, "Documents")
        self.update_status()

    async def send(
        self, question: str, content: str, sources: list[dict[str, Any]] | None = None
    ) -> None:
        """Save `content` (the question, after its sources if any) and start the reply."""
        data = self.need_data()
        if data is None:
            return
        try:
            if self.chat_id is None:
                title = backend.title_from_prompt(question)
                self.chat_id = data.create_chat(title, self.model_name)
                self.chat_documents[self.chat_id] = self.chat_documents.pop(None, ChatDocuments())
                self.sub_title = data.chat(self.chat_id).title
            rows = self.current_rows()
            parent = rows[-1].id if rows else None
            user_id = data.add_user(self.chat_id, content, parent)
            row = data.message(user_id)
        except SamchatError as exc:
            self.error(exc, "Database")
            return
        self.prompt.clear()
        await self.chat_view.add_view(self.chat_view.make_view(row), row)
        self.refresh_sidebar()
        await self.start_reply(user_id, sources)

    async def start_reply(self, user_id: int, sources: list[dict[str, Any]] | None = None) -> None:
        assert self.chat_id is not None
        view = MessageView(
            message_id=None, role="assistant", content="", model=self.model_name, parent_id=user_id
        )
        await self.chat_view.add_view(view)
        view.start_stream()
        job = ReplyJob(self.chat_id, user_id, view, LiveStats(time.perf_counter()), self.model_name)
        job.sources = list(sources or [])
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
            from samchat.chat.record import ReplyRecorder
            from samchat.decoding.events import ReplyDone, StepStats, TextDelta

            recorder = ReplyRecorder(job.live.started, sources=job.sources)
            for ev in gen.generate(messages, sampling, job.cancel):
                now = time.perf_counter()
                recorder.observe(ev, now)
                if isinstance(ev, TextDelta):
                    pieces = [(text, source) for text, source in ev.pieces]
                    self.post_message(
                        ReplyDelta(job, ev.text, pieces, len(ev.token_ids), list(ev.sources), now)
                    )
                elif isinstance(ev, StepStats):
                    self.post_message(ReplyStep(job, ev.forward_s))
                elif isinstance(ev, ReplyDone):
                    # The stored record, built as `samchat ask` builds it (samchat.chat.record).
                    stats = recorder.stats(ev)
                    self.post_message(
                        ReplyFinished(job, ev.text, ev.finish_reason, stats, ev.notice)
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

    @guarded
    async def on_reply_finished(self, msg: ReplyFinished) -> None:
        job = msg.job
        if self.job is job:
            self.job = None
        job.live.on_done(msg.stats)
        view = job.view
        stats = msg.stats  # the engine's figures and provenance; the streamed view matches them
        if msg.notice:
            self.notify(msg.notice, title="Context")
        text = msg.text
        message_id: int | None = None
        if self.data is not None:
            try:
                message_id = self.data.add_reply(
                    job.chat_id, text, job.parent_id, job.model, stats, msg.finish_reason
                )
            except SamchatError as exc:
                self.error(exc, "Database")
            else:
                self.poke_indexer()  # the turn joins the static index for later replies
        if not view.is_attached:  # the user opened another chat meanwhile
            await view.drop_stream()
        else:
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

    @guarded
    async def on_reply_failed(self, msg: ReplyFailed) -> None:
        if self.job is msg.job:
            self.job = None
        await msg.job.view.drop_stream()
        if msg.job.view.is_attached:
            await msg.job.view.remove()
        self.error(msg.error, "Generation failed")
        self.update_status()

    # -- model loading -------------------------------------------------------------------------

    def start_model_load(self, source: str, device: str, engine: str) -> None:
        self.model_state = "loading"
        self.model_progress = ""
        self.update_status()
        self.load_model_worker(source, device, engine, dict(self.cfg.decoding))

    @work(thread=True, exclusive=True, group="model", exit_on_error=False)
    def load_model_worker(
        self, source: str, device: str, engine: str, decoding: dict[str, Any]
    ) -> None:
        def progress(text: str) -> None:
            self.post_message(ModelProgress(text))

        try:
            lm = backend.load_lm(source, device, progress, self.model_options, engine)
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
        self.post_message(ModelLoaded(lm, generator, source, device, engine, warning))

    def on_model_progress(self, msg: ModelProgress) -> None:
        self.model_progress = msg.text
        self.update_status()

    @guarded
    def on_model_loaded(self, msg: ModelLoaded) -> None:
        self._adopt_model(msg.lm, msg.generator)
        self.notify(f"model {msg.lm.name} ready", timeout=3)
        if msg.warning:
            self.error(msg.warning, "Decoder")
        # The model screen opens on what runs now.
        self.model_source, self.device_name, self.engine_name = msg.source, msg.device, msg.engine
        chosen = (msg.source, msg.device, msg.engine)
        if chosen != (self.cfg.model, self.cfg.device, self.cfg.engine):
            self.cfg.model, self.cfg.device, self.cfg.engine = chosen
            self.save_settings()

    def _make_indexer(self, lm: LoadedModel) -> Any:
        """Keeps the static index in step with the store (own thread, own connection)."""
        if self.data is None:
            return None

        def failed(exc: Exception) -> None:  # runs in the indexer's thread
            self.post_message(Notice(f"static index: {exc}", "Index"))

        def progress(done: int, total: int, _what: str) -> None:  # the indexer's thread
            self.post_message(IndexProgress(done, total))

        try:
            return backend.start_indexer(lm, self.data.path, failed, progress)
        except Exception as exc:  # decoding still works without the static index
            self.post_message(Notice(f"static index unavailable: {exc}", "Index"))
            return None

    def on_index_progress(self, msg: IndexProgress) -> None:
        busy = msg.total > 0 and msg.done < msg.total
        self.index_progress = f"indexing {msg.done}/{msg.total}" if busy else ""
        self.update_status()

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
