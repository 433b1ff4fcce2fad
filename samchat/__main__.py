"""`python -m samchat`: the same as the `samchat` command."""

from __future__ import annotations

from samchat.entry import run

if __name__ == "__main__":
    run()
