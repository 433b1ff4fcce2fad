"""F1: keys (as remapped by the keymap) and what the statistics mean."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Markdown

ABOUT = """
## Reading the statistics

* **tok/s** – committed tokens per second of the reply so far.
* **MAT** – mean accepted tokens per verification step: how many tokens each forward pass of the
  model commits (1.0 = plain decoding).
* **speedup** – estimated speed over plain decoding (live: from step timings; final: the engine's
  estimate).
* **accepted dyn / static / tr** – share of the reply's tokens that the dynamic suffix automaton
  (this chat), the static suffix automaton (imported documents) or Token Recycling proposed and
  the model accepted. The rest came from plain steps.
* The sparkline plots the speed of each committed chunk over the reply.

Speculative decoding here is **lossless**: with greedy sampling the reply is token for token the
one plain decoding gives.

## Provenance view

Toggle it to colour every reply's tokens by the drafter that proposed them; plain-step tokens
stay uncoloured.

## Config

`config.toml` in the samchat config directory holds the theme, the model, decoding and sampling
settings and a `[keymap]` table mapping binding ids (below) to keys, e.g.
`"samchat.regenerate" = "ctrl+g"`. Theme files (`*.toml`) in its `themes/` folder are loaded too.
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss", "Close"),
        Binding("f1", "dismiss", "Close", show=False),
        Binding("q", "dismiss", "Close", show=False),
    ]

    def __init__(self, keys: list[tuple[str, str, str]]) -> None:
        """keys: (key, description, binding id) rows."""
        super().__init__(classes="dialog-screen")
        self.keys = keys

    def compose(self) -> ComposeResult:
        rows = ["# samchat help", "", "| key | action | binding id |", "|---|---|---|"]
        rows += [f"| `{key}` | {desc} | `{bid}` |" for key, desc, bid in self.keys]
        rows += [
            "| `enter` | send the prompt | |",
            "| `shift+enter` / `ctrl+j` | new line in the prompt | |",
            "| `ctrl+p` | command palette (every action) | |",
            "| `ctrl+q` | quit | |",
            "| `↑` `↓` (on a message) | previous / next message | |",
            "| `←` `→` (on a message) | previous / next branch | |",
            "| `c` / `e` (on a message) | copy it / edit and resend | |",
        ]
        with Vertical(classes="dialog -wide -tall", id="help-dialog"):
            yield Markdown("\n".join(rows) + "\n" + ABOUT, id="help-text")
