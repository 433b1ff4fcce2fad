"""What the chat screen and its conversation need from the app, as a Protocol: the screens and
widgets are handed the app as a ChatHost and never import samchat.tui.app (a contract in
pyproject.toml), so the app composes them and nothing imports back."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from samchat.chat.config import Config
    from samchat.chat.generator import Replies
    from samchat.chat.opening import Model
    from samchat.chat.service import ChatService
    from samchat.store import Store
    from samchat.tui.states import ModelState


class ChatHost(Protocol):
    """Read when needed: the store, the model and the settings change while the app runs."""

    @property
    def cfg(self) -> Config: ...  # sampling, decoding method, the documents' rule

    @property
    def data(self) -> Store | None: ...  # None: the database did not open

    @property
    def service(self) -> ChatService | None: ...  # the turns of a chat, over `data`

    @property
    def lm(self) -> Model | None: ...

    @property
    def generator(self) -> Replies | None: ...  # None until a model is loaded

    @property
    def model_state(self) -> ModelState: ...

    @property
    def model_progress(self) -> str: ...  # what a loading model is doing

    @property
    def index_progress(self) -> str: ...  # e.g. "indexing 3/40"

    @property
    def model_name(self) -> str: ...  # what a new reply is stored as written by

    def error(self, exc: BaseException | str, title: str = "Error") -> None: ...

    def poke_indexer(self) -> None: ...  # the store changed: the static index follows

    def ui_ready(self) -> None: ...  # the chat screen is up
