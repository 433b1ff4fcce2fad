"""Child processes that get Ctrl-C as a terminal's foreground process does."""

from __future__ import annotations

import signal


def as_from_a_terminal() -> None:
    """SIGINT as a terminal's foreground process gets it (a Popen preexec_fn): a test runner
    started in the background ignores it, and one may block it; a child inherits both (Python
    then installs no KeyboardInterrupt handler, or never sees the signal)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
