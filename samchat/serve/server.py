"""`samchat serve`'s process: the socket, the static index, the engine thread and uvicorn; and
the engine thread's work between requests (the engines measured for a model with no record,
then this machine's costs timed), which gives way to a request."""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import uvicorn

from samchat.errors import SamchatError
from samchat.serve.app import ServeApp
from samchat.serve.history import History
from samchat.serve.worker import EngineWorker

if TYPE_CHECKING:
    from samchat.chat.generator import Generator
    from samchat.decoding.params import DecodingConfig
    from samchat.models.engine_trial import Trial
    from samchat.models.loader import LoadedModel

# Seconds the server waits for open connections at shutdown: in-flight replies are cancelled
# at once, so this only bounds a client that is slow to read the end (Ctrl-C: within 2 s).
SHUTDOWN_GRACE_S = 1
STOP_WAIT_S = 1.0  # then for the engine and indexer threads (the process ends without them)


@dataclass(frozen=True)
class ServeOptions:
    host: str
    port: int
    api_key: str | None
    save: bool
    decoding: DecodingConfig


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """The server's socket, bound now (before the model loads) so a busy port fails fast."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise SamchatError(f"cannot listen on {host}: {exc}; check --host") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise SamchatError(
            f"cannot listen on {host}:{port}: {reason}; choose another --port"
        ) from None
    return sock


def url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


class _Server(uvicorn.Server):
    """uvicorn's server, stopping the engine first on SIGINT/SIGTERM."""

    def __init__(self, config: uvicorn.Config, worker: EngineWorker) -> None:
        super().__init__(config)
        self.worker = worker

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.worker.stop_soon()  # in-flight and queued replies end now, so connections close
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn's own re-raises the signal after the graceful shutdown, which would end the
        # process by the signal; a clean stop exits 0 instead.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        originals = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in originals.items():
                signal.signal(sig, handler)


def _nothing() -> None:
    pass


def _say(text: str) -> None:
    print(f"[{text}]", file=sys.stderr, flush=True)


class Answering:
    """The generator requests are answered by: another one once the engines measured after
    the first answer find a faster one (between requests, where the API stays the same)."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator
        self.trial = generator.lm.trial  # owed by the model loaded at start, if anything

    def idle(self, wanted: Callable[[], bool]) -> None:
        """The engine thread's idle work: the engines measured once (a model with no record),
        then this machine timed once, after a plain first reply."""
        if self.trial is not None:
            self._measure(self.trial, wanted)
        else:
            self._time_machine(wanted)

    def _measure(self, trial: Trial, wanted: Callable[[], bool]) -> None:
        from samchat.chat.generator import Generator
        from samchat.engines.costs import MeasurementCancelled
        from samchat.models.engine_choice import why

        lm = self.generator.lm
        _say("measuring the engines on this CPU once, between requests")
        try:
            result = trial.run(lm, wanted, lambda _: None)
        except MeasurementCancelled:
            _say("measuring paused for a request; it starts again when idle")
            return
        except SamchatError as exc:  # not tried again: the model stays on its engine
            _say(f"measuring the engines failed: {exc}")
            self.trial = lm.trial = None
            return
        self.trial = lm.trial = None
        faster = result.faster
        note = why(trial.spec, faster.engine if faster else lm.engine, trial.cache_dir)
        if faster is None:
            _say(f"{lm.engine} stays: {note}")
        elif faster.context_limit != lm.context_limit:  # the routes answer with lm's limit
            _say(f"{faster.engine} from the next start: {note}")
        else:
            old = self.generator
            self.generator = Generator(
                faster, old.decoding, old.indexer, old.cost_curve, old.cache_dir, False
            )
            self.generator.prepare()
            faster.engine_note = note
            _say(f"replies now run on {faster.engine}: {note}")

    def _time_machine(self, wanted: Callable[[], bool]) -> None:
        from samchat.engines.costs import MeasurementCancelled

        generator = self.generator
        if not generator.curve_missing():
            return
        _say("timing drafts on this CPU once, between requests")
        try:
            generator.measure_cost_curve(wanted)
        except MeasurementCancelled:
            _say("timing paused for a request; it resumes when idle")
            return
        except SamchatError as exc:  # replies stay plain, and the next idle spell tries again
            _say(f"timing drafts failed: {exc}")
            return
        _say("timed: replies draft from now on")


def serve(
    lm: LoadedModel,
    sock: socket.socket,
    options: ServeOptions,
    db_path: Path,
    cache_dir: Path | None = None,
) -> bool:
    """Serve `lm` on `sock` until SIGINT/SIGTERM; what is measured on this machine (costs,
    Token Recycling's table) is kept under cache_dir. False: the engine thread was still in
    a step when the server stopped (the process must end without freeing the model under it)."""
    from samchat.chat.documents import start_indexer
    from samchat.chat.generator import Generator
    from samchat.engines.engine_thread import ENGINE_THREAD

    def index_failed(exc: Exception) -> None:  # the indexer's thread; replies draft without it
        print(f"[static index unavailable: {exc}]", file=sys.stderr, flush=True)

    indexer = start_indexer(lm, db_path, index_failed)
    worker: EngineWorker | None = None
    stopped = True
    try:
        # Listening comes first: an untimed machine answers plainly, and is timed between
        # requests after the first reply (a request that comes meanwhile pauses the timing).
        generator = Generator(
            lm, options.decoding, indexer, cache_dir=cache_dir, measure_first=False
        )
        ENGINE_THREAD.run(generator.prepare)  # the model's threads are the engine thread's
        poke = indexer.poke if indexer is not None else _nothing  # None: a model without tokenizer
        history = History(db_path, lm.name, poke) if options.save else None
        answering = Answering(generator)
        worker = EngineWorker(
            lambda m, p, c: answering.generator.session().generate(m, p, c), history, answering.idle
        )
        worker.start()
        app = ServeApp(worker, lm.name, lm.context_limit, options.api_key).starlette()
        config = uvicorn.Config(
            app, lifespan="off", timeout_graceful_shutdown=SHUTDOWN_GRACE_S, log_level="info"
        )
        print(f"[serving {lm.name} at {url(sock)}; Ctrl-C stops]", file=sys.stderr, flush=True)
        _Server(config, worker).run(sockets=[sock])
    finally:
        # Both threads stop at their next step; a step stuck in C is not waited for long.
        if worker is not None:
            stopped = worker.stop(timeout=STOP_WAIT_S)
        if indexer is not None:
            indexer.stop(timeout=STOP_WAIT_S)
        if lm.trial is not None:  # the child preparing weights for it ends now
            lm.trial.close()
        sock.close()
    return stopped
