"""The `samchat` command's entry point: Ctrl-C handling (samchat.interrupts) goes in before
anything heavy is imported, so a Ctrl-C during start-up is obeyed like any other."""

from __future__ import annotations

import sys


def run() -> None:
    from samchat import interrupts

    interrupts.install()
    try:
        from samchat.cli import main

        code = main()
    except KeyboardInterrupt:  # during the imports above, before main's own handling
        interrupts.say_cancelled()
        code = interrupts.EXIT_INTERRUPTED
    if code == interrupts.EXIT_INTERRUPTED or interrupts.interrupted():
        # No teardown: freeing a model can take seconds, or crash under a thread still in it.
        interrupts.exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
