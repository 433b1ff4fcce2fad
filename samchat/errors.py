"""User-facing errors: each carries one line that names the problem and what to do.

The command line prints one as `error: <message>` on stderr and exits with status 1 (2 is kept
for usage errors, 130 for Ctrl-C: see samchat/cli.py and docs/configuration.md)."""


class SamchatError(Exception):
    """An error shown to the user as a single line, never as a traceback."""


class ModelLoadError(SamchatError):
    """A model could not be found, read or loaded."""


class EngineDeclinedError(ModelLoadError):
    """The engine cannot run this model here, where llama.cpp can. The loader runs the file on
    llama.cpp instead where samchat chose the engine, and names the problem where the user did."""


class InexactError(EngineDeclinedError):
    """An engine cannot compute the model its file defines (a type, tensor, architecture or
    rope scaling it does not hold exactly)."""


class TooLargeError(EngineDeclinedError):
    """An engine's load of the model would not fit in the memory available (checked before
    loading, so the kernel never kills the process halfway)."""


class IndexCorruptError(SamchatError):
    """A static index file is truncated, corrupt or built with another tokenizer."""


class StoreError(SamchatError):
    """The SQLite store could not be opened or written."""


class ImportFailed(SamchatError):
    """A document import failed as a whole (per-file problems are reported as skips)."""


def one_line(exc: BaseException) -> str:
    """An exception's message as one short line, for the reason part of a SamchatError
    (third-party libraries raise multi-line, sometimes very long messages)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."
