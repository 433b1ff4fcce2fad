"""The app's actions: default keys, descriptions and binding ids (remappable in [keymap])."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.dom import DOMNode

# (action, default key, description, shown in the footer)
ACTIONS: list[tuple[str, str, str, bool]] = [
    ("help", "f1", "Help", True),
    ("new_chat", "ctrl+n", "New chat", True),
    ("rename_chat", "f2", "Rename chat", False),
    ("delete_chat", "f8", "Delete chat", False),
    ("system_prompt", "f12", "System prompt", False),
    ("search", "ctrl+f", "Search chats", False),
    ("stop", "escape", "Stop", True),
    ("regenerate", "ctrl+r", "Regenerate", True),
    ("edit_message", "f4", "Edit & resend", False),
    ("branch_prev", "ctrl+b", "Previous branch", False),
    ("branch_next", "ctrl+g", "Next branch", False),
    ("copy_message", "f5", "Copy message", False),
    ("copy_code", "f3", "Copy code block", False),
    ("toggle_provenance", "f9", "Provenance", True),
    ("toggle_stats", "f6", "Reply figures", False),
    ("load_earlier", "ctrl+u", "Load earlier messages", False),
    ("message_up", "ctrl+up", "Select previous message", False),
    ("message_down", "ctrl+down", "Select next message", False),
    ("pick_model", "ctrl+l", "Model", True),
    ("import_documents", "ctrl+o", "Import", True),
    ("documents", "f7", "Documents for this chat", False),
    ("settings", "ctrl+s", "Settings", True),
    ("pick_theme", "ctrl+t", "Theme", False),
]
# The app's own actions; every other one acts on the chat and is the ChatScreen's.
APP_ACTIONS = {"help", "pick_model", "settings", "pick_theme"}
# Keys a focused text widget would otherwise take.
PRIORITY = {"f6", "f7", "ctrl+u", "f12"}


def binding_id(action: str) -> str:
    return f"samchat.{action}"


def action_target(action: str) -> str:
    """The action string a binding runs: chat actions go to the screen (the chat screen)."""
    return action if action in APP_ACTIONS else f"screen.{action}"


def app_bindings() -> list[BindingType]:
    """All of them on the app, so the footer, the keymap and the help list stay in one order."""
    return [
        Binding(
            key,
            action_target(action),
            desc,
            show=show,
            id=binding_id(action),
            priority=key in PRIORITY,
        )
        for action, key, desc, show in ACTIONS
    ]


def palette_commands(
    app: App[None], chat: DOMNode, keymap: Mapping[str, str]
) -> Iterable[SystemCommand]:
    """Every action in the command palette, with the key it has now (the user's keymap)."""
    for action, key, desc, _ in ACTIONS:
        if action == "pick_theme":
            continue  # textual's own "Theme" command does this
        shown = keymap.get(binding_id(action), key)
        target = app if action in APP_ACTIONS else chat
        yield SystemCommand(desc, f"{desc} ({shown})", partial(app.run_action, action, target))
