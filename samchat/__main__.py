"""`python -m samchat`: the same as the `samchat` command."""

from __future__ import annotations

import sys

from samchat.cli import main

if __name__ == "__main__":
    sys.exit(main())
