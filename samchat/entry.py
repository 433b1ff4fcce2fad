"""The `samchat` command's entry point: Ctrl-C handling (samchat.interrupts) goes in before
anything heavy is imported, so a Ctrl-C during start-up is obeyed like any other."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

EXIT_INTERRUPTED = 130


def _before_start(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C before samchat.interrupts is in place: nothing has happened yet, so stop now."""
    os.write(2, b"\n[cancelled]\n")
    os._exit(EXIT_INTERRUPTED)


def run() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _before_start)  # until install() replaces it
    from samchat import interrupts

    interrupts.install()
    try:
        from samchat.cli import main

        code = main()
    except KeyboardInterrupt:  # during the imports above, before main's own handling
        interrupts.say_cancelled()
        code = interrupts.EXIT_INTERRUPTED
    if code == EXIT_INTERRUPTED or interrupts.interrupted() or interrupts.fast_exit():
        # No teardown: freeing a model can take seconds, or crash under a thread still in it.
        interrupts.exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
