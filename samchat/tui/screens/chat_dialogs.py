"""The chat screen's dialogs: each opens one, applies what it returns to the store and hands the
outcome to a callback of the screen's (which reopens the chat, refreshes the sidebar…). They are
given what they act on; none holds any state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from samchat.chat.documents import import_documents as import_into
from samchat.errors import SamchatError
from samchat.tui.screens.dialogs import ConfirmScreen, EditorScreen, InputScreen
from samchat.tui.screens.documents import ChatDocuments, DocumentsScreen
from samchat.tui.screens.import_documents import ImportScreen

if TYPE_CHECKING:
    from textual.app import App

    from samchat.chat.service import ChatService, PendingReply
    from samchat.store import Chat, MessageRow, Store

Error = Callable[[BaseException | str, str], None]  # the host's notice of an error


def rename_chat(
    app: App[object], data: Store, chat_id: int, error: Error, renamed: Callable[[str], None]
) -> None:
    def done(title: str | None) -> None:
        if not title or not title.strip():
            return
        try:
            data.rename_chat(chat_id, title.strip())
        except SamchatError as exc:
            error(exc, "Rename")
            return
        renamed(title.strip())

    app.push_screen(InputScreen("Rename chat", data.chat(chat_id).title), done)


def delete_chat(
    app: App[object],
    data: Store,
    chat_id: int,
    error: Error,
    deleted: Callable[[], Awaitable[None]],
) -> None:
    async def done(yes: bool | None) -> None:
        if not yes:
            return
        try:
            data.delete_chat(chat_id)
        except SamchatError as exc:
            error(exc, "Delete")
            return
        await deleted()

    title = data.chat(chat_id).title
    app.push_screen(ConfirmScreen(f"Delete the chat “{title}” and all its messages?"), done)


def system_prompt(app: App[object], data: Store, chat: Chat, error: Error) -> None:
    def done(text: str | None) -> None:
        if text is None:
            return
        try:
            data.set_system_prompt(chat.id, text.strip() or None)
        except SamchatError as exc:
            error(exc, "Error")
            return
        app.notify("system prompt saved" if text.strip() else "system prompt cleared", timeout=2)

    app.push_screen(
        EditorScreen(f"System prompt for “{chat.title}”", chat.system_prompt or ""), done
    )


def edit_message(
    app: App[object],
    service: ChatService,
    original: MessageRow,
    model: Callable[[], str],
    error: Error,
    resend: Callable[[PendingReply], Awaitable[None]],
    still_open: Callable[[], bool],
) -> None:
    """Edit a question of the user's and resend it: a new branch, answered by `resend`, unless
    its chat is no longer the open one (`still_open`)."""

    async def done(text: str | None) -> None:
        if text is None or not text.strip() or not still_open():
            return
        try:
            reply = service.edit(original.id, text.strip(), model=model())
        except SamchatError as exc:
            error(exc, "Database")
            return
        await resend(reply)

    app.push_screen(
        EditorScreen("Edit and resend (makes a new branch)", original.content, accept="Resend"),
        done,
    )


def import_documents(
    app: App[object], data: Store, imported: Callable[[], None], use_in_chat: Callable[[], None]
) -> None:
    store_path = data.path

    def importer(path: str, progress: Callable[[int, int, str], None]) -> str:
        return import_into(path, store_path, progress)

    app.push_screen(ImportScreen(importer, imported, use_in_chat))


def chat_documents(
    app: App[object],
    by_chat: dict[int | None, ChatDocuments],
    chat_id: int | None,
    changed: Callable[[], None],
) -> None:
    """The documents of `chat_id` (in `by_chat`, each chat's) chosen anew."""

    def done(docs: ChatDocuments | None) -> None:
        if docs is None:
            return
        by_chat[chat_id] = docs
        changed()
        if docs.active:
            app.notify(f"{docs.summary()} for this chat", title="Documents", timeout=3)

    app.push_screen(DocumentsScreen(by_chat.setdefault(chat_id, ChatDocuments())), done)
