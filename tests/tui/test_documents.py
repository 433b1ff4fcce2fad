"""Documents in the TUI: the F7 dialog (retrieval, attached files), the import dialog's
"answer from the documents", and a reply that answers from a passage and names it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Checkbox, Collapsible, Input, Static
from tui_helpers import fixed_config, wait_for

from samchat.corpus.importer import import_paths
from samchat.store import Store
from samchat.tui.app import SamchatApp
from samchat.tui.screens.documents import DocumentsScreen
from samchat.tui.screens.import_documents import ImportScreen

FACT = "The warranty of the Aurora kettle lasts seven years from the date of purchase."
QUESTION = "How long does the Aurora kettle warranty last? Quote the sentence."


async def test_documents_dialog_attaches_checked_files_only(
    make_app: Callable[..., SamchatApp], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text(f"# Notes\n\n{FACT}\n")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)))
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("f7")
        # Pushed is not yet composed: wait for the widgets the test uses, not just the screen.
        await wait_for(
            pilot,
            lambda: (
                isinstance(app.screen, DocumentsScreen) and bool(app.screen.query("#docs-done"))
            ),
        )
        screen = app.screen
        for bad in ("missing.md", "blob.bin"):
            screen.query_one("#docs-path", Input).value = str(tmp_path / bad)
            await pilot.press("enter")
            await pilot.pause()
        assert screen.docs.files == []  # each refused with a one-line notification
        problems = [n.message for n in app._notifications]
        assert any("no such file" in p for p in problems)
        assert any("binary file" in p for p in problems)
        screen.query_one("#docs-path", Input).value = str(notes)
        await pilot.press("enter")
        await pilot.pause()
        assert screen.docs.files == [notes]
        screen.query_one("#docs-retrieval", Checkbox).value = True
        await pilot.click("#docs-done")
        await wait_for(pilot, lambda: not isinstance(app.screen, DocumentsScreen))
        assert app.chat.documents.retrieval and app.chat.documents.files == [notes]
        status = str(app.query_one("#status", Static).render())
        assert "documents on, 1 file attached" in status
        # Without a model nothing is sent: the sources are fitted to the model's context.
        app.chat.prompt.insert("What is in it?")
        await pilot.press("enter")
        await pilot.pause()
        assert app.chat.chat_id is None and app.chat.prompt.text == "What is in it?"


async def test_import_dialog_turns_retrieval_on(
    make_app: Callable[..., SamchatApp], tmp_path: Path, store: Store
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text(f"# Notes\n\n{FACT}\n")
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("ctrl+o")
        await wait_for(
            pilot,
            lambda: isinstance(app.screen, ImportScreen) and bool(app.screen.query("#import-path")),
        )
        app.screen.query_one("#import-use", Checkbox).value = True
        app.screen.query_one("#import-path", Input).value = str(docs)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.chat.documents.retrieval, 30)
        assert store.passage_count() == 1


@pytest.mark.model
async def test_a_reply_answers_from_a_retrieved_passage_and_names_it(
    make_app: Callable[..., SamchatApp], tmp_path: Path, store: Store, default_lm: Any
) -> None:
    from samchat.engines.costs import CostCurve

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text(f"# Kitchen notes\n\n{FACT}\n\n# Office\n\nRoom 4.\n")
    import_paths(store, [docs])
    cfg = fixed_config()
    cfg.sampling = dataclasses.replace(cfg.sampling, max_new_tokens=40)
    app = make_app(lm=default_lm, config=cfg, cost_curve=CostCurve.default(default_lm.device_type))
    async with app.run_test(size=(120, 40)) as pilot:
        app.chat.documents.retrieval = True
        app.chat.prompt.focus()
        app.chat.prompt.insert(QUESTION)
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.chat.replies_finished == 1, 180)
        assert app.chat.chat_id is not None
        question, reply = store.thread(app.chat.chat_id)
        # What the model was given is saved, and the chat keeps the question as its title.
        assert FACT in question.content and question.content.endswith(QUESTION)
        assert store.chat(app.chat.chat_id).title.startswith("How long does the Aurora")
        assert "seven years" in reply.content
        assert reply.stats is not None
        [source] = reply.stats.sources
        assert source.title == "Kitchen notes" and (source.path or "").endswith("notes.md")
        user_view, reply_view = app.chat.chat_view.views()
        folded = user_view.query_one(Collapsible)
        assert folded.collapsed and folded.title == "sources (1)"
        used = str(reply_view.query_one(".msg-used", Static).render())
        assert used.startswith("sources: [1] Kitchen notes (")
        # The chat keeps its documents for the next question.
        assert app.chat.documents.retrieval
        # A regenerated reply answers the same question with the same sources.
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: app.chat.replies_finished == 2, 180)
        again = [m for m in store.messages(app.chat.chat_id) if m.role == "assistant"][-1]
        assert again.id != reply.id and again.stats is not None and again.stats.sources == (source,)
