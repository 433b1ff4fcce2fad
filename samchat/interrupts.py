"""Ctrl-C in the command-line front ends (`ask`, `serve`, the other commands): obeyed within a
second or two wherever it lands.

- Outside a reply, Ctrl-C raises KeyboardInterrupt as Python does (the CLI exits 130).
- During a reply (`cancel_on_interrupt`), it sets the reply's cancel event instead, so the
  engine or the remote read stops at its next step and the partial reply is saved as cancelled.
  An exception thrown into a C callback or asyncio's internals can be lost; a flag cannot.
- Python runs signal handlers only between bytecodes of the main thread, so a long C call
  (a llama.cpp decode, a torch forward) would delay them. A watcher thread reads the signal
  from `signal.set_wakeup_fd` the moment it arrives: it sets the cancel events, and arms a
  watchdog that ends the process `GRACE_S` later if it has not ended by itself (a C call that
  does not return, a read that ignores its cancel). SQLite commits are atomic, so that exit
  loses no saved row. A second Ctrl-C exits at once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import CodeType, FrameType
from typing import TypedDict

EXIT_INTERRUPTED = 130  # 128 + SIGINT
GRACE_S = 1.5  # from a Ctrl-C to the forced exit; a clean stop takes a fraction of it

_armed = threading.Event()
_said = threading.Event()  # "[cancelled]" is on stderr already
_deferred = threading.Event()  # a Ctrl-C that landed in a callback from C (see defer_in)
_defer_codes: set[CodeType] = set()
_fast_exit = threading.Event()  # end without the interpreter's teardown (see exit_promptly)
_cancels: list[threading.Event] = []  # the replies a Ctrl-C cancels now
# A SIGINT handler as signal.signal takes and returns it (SIG_DFL and SIG_IGN are ints).
Handler = Callable[[int, FrameType | None], object] | int | None


class _Installed(TypedDict, total=False):
    """The installed handler's undo: the previous handler, wakeup fd, and the socket pair."""

    handler: Handler
    wakeup: int
    sockets: tuple[socket.socket, socket.socket]


_state: _Installed = {}


def say_cancelled(detail: str = "") -> None:
    """The one line an interrupted command ends with (once)."""
    if not _said.is_set():
        _said.set()
        with contextlib.suppress(Exception):  # stderr may be closed
            sys.stderr.write(f"\n[cancelled{': ' + detail if detail else ''}]\n")
            sys.stderr.flush()


def exit_now(code: int = EXIT_INTERRUPTED) -> None:
    """End the process without the interpreter's teardown (freeing a model can take seconds);
    what the store committed is on disk already."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


def _force_exit(after: float) -> None:
    time.sleep(after)
    say_cancelled("stopped without waiting for the rest to finish")
    if os.environ.get("SAMCHAT_DEBUG"):  # where it was stuck
        import faulthandler

        faulthandler.dump_traceback(all_threads=True)
    exit_now()


def arm_watchdog(after: float = GRACE_S) -> None:
    """End the process `after` seconds from now unless it ends by itself first (armed once)."""
    if _armed.is_set():
        return
    _armed.set()
    threading.Thread(target=_force_exit, args=(after,), name="samchat-ctrl-c", daemon=True).start()


def interrupted() -> bool:
    """A Ctrl-C has arrived."""
    return _armed.is_set()


def _on_ctrl_c() -> None:
    """The first Ctrl-C: seen by the watcher thread at once, and by the handler later (then
    a no-op). Only a process whose entry point installed the watcher is ever ended by it."""
    for cancel in list(_cancels):
        cancel.set()
    if _state:
        arm_watchdog()


def _watch(sock: socket.socket) -> None:
    seen = 0
    while True:
        try:
            data = sock.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum != signal.SIGINT:
                continue
            seen += 1
            if seen > 1:  # the second Ctrl-C: no more waiting
                say_cancelled()
                exit_now()
            _on_ctrl_c()


def defer_in(code: CodeType) -> None:
    """A Python callback that C code calls (`code`, its function's __code__): a Ctrl-C that
    lands in it is not raised there (ctypes would print it and drop it) but kept; the caller
    raises it once the C call returns (take_deferred)."""
    _defer_codes.add(code)


def take_deferred() -> bool:
    """A Ctrl-C was kept by a callback since the last call."""
    if _deferred.is_set():
        _deferred.clear()
        return True
    return False


def exit_promptly() -> None:
    """The command's end should not wait for the interpreter's teardown (threads still in C
    calls, models being freed): the entry point exits at once."""
    _fast_exit.set()


def fast_exit() -> bool:
    return _fast_exit.is_set()


def _raise(signum: int, frame: FrameType | None) -> None:
    _on_ctrl_c()  # without the watcher (not the main thread's install); else a no-op
    if frame is not None and frame.f_code in _defer_codes:
        _deferred.set()
        return
    raise KeyboardInterrupt


def install() -> bool:
    """Ctrl-C raises KeyboardInterrupt, and the watcher thread arms the watchdog. Main thread
    only; False if not installed (another thread, or installed already)."""
    if threading.current_thread() is not threading.main_thread() or _state:
        return False
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a background job: the shell's choice
        return False
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    _state["handler"] = signal.signal(signal.SIGINT, _raise)
    _state["wakeup"] = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    _state["sockets"] = (reader, writer)
    threading.Thread(target=_watch, args=(reader,), name="samchat-signals", daemon=True).start()
    return True


def uninstall() -> None:
    """Undo install() (a test that calls the CLI in-process, or the app taking the terminal)."""
    if not _state or threading.current_thread() is not threading.main_thread():
        return
    signal.set_wakeup_fd(_state.pop("wakeup"))
    signal.signal(signal.SIGINT, _state.pop("handler"))
    reader, writer = _state.pop("sockets")
    writer.close()
    with contextlib.suppress(OSError):
        reader.shutdown(socket.SHUT_RDWR)  # the watcher's recv returns, and it ends
    reader.close()


@contextlib.contextmanager
def cancel_on_interrupt(cancel: threading.Event) -> Iterator[None]:
    """While inside, Ctrl-C sets `cancel` (at once, from the watcher thread) instead of
    raising KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _cancel(signum: int, frame: FrameType | None) -> None:
        _on_ctrl_c()
        cancel.set()

    _cancels.append(cancel)
    previous: Handler = signal.signal(signal.SIGINT, _cancel)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _cancels.remove(cancel)
