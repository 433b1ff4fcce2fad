"""Pilot tests of the app's actions that need no model: chats, search, branches, copy, views."""

from __future__ import annotations

from collections.abc import Callable

from textual.widgets import Input, OptionList, Static
from tui_helpers import seed_chat, wait_for

from samchat.store import Store
from samchat.tui.app import SamchatApp
from samchat.tui.screens.dialogs import ConfirmScreen, EditorScreen, InputScreen, PickScreen
from samchat.tui.widgets.message_view import MessageView


def status_text(app: SamchatApp) -> str:
    return str(app.query_one("#status", Static).render())


def chat_list_ids(app: SamchatApp) -> list[str]:
    lst = app.query_one("#chat-list", OptionList)
    return [lst.get_option_at_index(i).id or "" for i in range(lst.option_count)]


async def test_sidebar_lists_chats_newest_first_and_opens_one(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    old = seed_chat(store, "Old chat", [("hi", "hello")])
    new = seed_chat(store, "New chat about suffix automata", [("what is a SAM?", "a graph")])
    store.add_message(new, "user", "later", store.thread(new)[-1].id)  # touch: newest
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        assert chat_list_ids(app) == [f"chat-{new}", f"chat-{old}"]
        lst = app.query_one("#chat-list", OptionList)
        lst.focus()
        lst.highlighted = 1
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.chat.chat_id == old)
        assert [v.content for v in app.chat.chat_view.views()] == ["hi", "hello"]


async def test_enter_sends_and_ctrl_j_adds_a_newline(
    make_app: Callable[..., SamchatApp], db_path: object
) -> None:
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press(*"first", "ctrl+j", *"second")
        assert app.chat.prompt.text == "first\nsecond"
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.chat.chat_id is not None)
        assert app.chat.prompt.text == ""
        assert app.data is not None
        rows = app.data.thread(app.chat.chat_id)  # type: ignore[arg-type]
        assert [(r.role, r.content) for r in rows] == [("user", "first\nsecond")]
        # No model: the prompt waits, visibly; esc gives up waiting.
        assert app.chat.conversation.replies.pending is not None
        assert "waits for the model" in status_text(app)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.chat.conversation.replies.pending is None)
        await wait_for(pilot, lambda: len(app.chat.chat_view.views()) == 1)
        assert "waits" not in status_text(app)


async def test_empty_prompt_sends_nothing(make_app: Callable[..., SamchatApp]) -> None:
    app = make_app()
    async with app.run_test() as pilot:
        await pilot.press("space", "enter")
        await pilot.pause()
        assert app.chat.chat_id is None
        assert app.data is not None and app.data.chats() == []


async def test_search_finds_a_message_and_opens_its_branch(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    seed_chat(store, "Cooking", [("how long to boil an egg", "about nine minutes")])
    target = seed_chat(store, "Automata", [("explain suffix automata", "they index substrings")])
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("ctrl+f")
        assert isinstance(app.focused, Input) and app.focused.id == "search"
        await pilot.press(*"substrings")
        await wait_for(pilot, lambda: chat_list_ids(app)[0].startswith("hit-"))
        assert len(chat_list_ids(app)) == 1
        await pilot.press("enter")  # search box -> list
        await pilot.press("enter")  # open the hit
        await wait_for(pilot, lambda: app.chat.chat_id == target)
        assert isinstance(app.focused, MessageView)
        assert app.focused.content == "they index substrings"
        # A query with no match says so; clearing it brings the chat list back.
        app.query_one("#search", Input).value = "zebra"
        await pilot.pause()
        assert chat_list_ids(app) == [""]
        app.query_one("#search", Input).value = ""
        await pilot.pause()
        assert len(chat_list_ids(app)) == 2


async def test_new_chat_clears_the_view(make_app: Callable[..., SamchatApp], store: Store) -> None:
    chat = seed_chat(store, "A", [("q", "a")])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        assert len(app.chat.chat_view.views()) == 2
        await pilot.press("ctrl+n")
        await pilot.pause()
        assert app.chat.chat_id is None
        assert app.chat.chat_view.views() == []
        assert app.focused is app.chat.prompt


async def test_rename_chat(make_app: Callable[..., SamchatApp], store: Store) -> None:
    chat = seed_chat(store, "Untitled", [("q", "a")])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        await pilot.press("f2")
        await wait_for(pilot, lambda: isinstance(app.screen, InputScreen))
        app.screen.query_one(Input).value = ""
        await pilot.press(*"Renamed chat", "enter")
        await wait_for(pilot, lambda: store.chat(chat).title == "Renamed chat")
        assert "Renamed chat" in str(
            app.query_one("#chat-list", OptionList).get_option_at_index(0).prompt
        )


async def test_delete_chat_asks_first(make_app: Callable[..., SamchatApp], store: Store) -> None:
    keep = seed_chat(store, "Keep", [("q", "a")])
    doomed = seed_chat(store, "Doomed", [("q", "a")])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(doomed)
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("escape")  # cancelled: nothing deleted
        await pilot.pause()
        assert {c.id for c in store.chats()} == {keep, doomed}
        await pilot.press("f8")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_for(pilot, lambda: [c.id for c in store.chats()] == [keep])
        assert app.chat.chat_id is None
        assert chat_list_ids(app) == [f"chat-{keep}"]


async def test_system_prompt_is_saved_per_chat(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    chat = seed_chat(store, "A", [("q", "a")])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        await pilot.press("f12")
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        await pilot.press(*"You are terse.", "ctrl+s")
        await wait_for(pilot, lambda: store.chat(chat).system_prompt == "You are terse.")
        assert app.data is not None
        leaf = store.thread(chat)[0].id
        assert app.data.conversation(chat, leaf)[0] == {
            "role": "system",
            "content": "You are terse.",
        }


async def test_branches_move_between_alternatives(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    chat = store.create_chat("Branches", "m")
    user = store.add_message(chat, "user", "pick a colour", None)
    first = store.add_message(chat, "assistant", "red", user)
    second = store.add_message(chat, "assistant", "blue", user)
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        views = app.chat.chat_view.views()
        assert [v.content for v in views] == ["pick a colour", "blue"]
        assert views[1].branch == (2, 2)
        assert "‹ 2/2 ›" in str(views[1].query_one(".msg-header", Static).render())
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: app.chat.chat_view.views()[-1].content == "red")
        assert app.chat.chat_view.views()[-1].message_id == first
        assert app.chat.chat_view.views()[-1].branch == (1, 2)
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: app.chat.chat_view.views()[-1].message_id == second)


async def test_branch_switch_without_alternatives_says_so(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    chat = seed_chat(store, "Linear", [("q", "a")])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        await pilot.press("ctrl+b")
        await pilot.pause()
        assert any("no other branches" in n.message for n in app._notifications)
        assert [v.content for v in app.chat.chat_view.views()] == ["q", "a"]


async def test_copy_message_and_code_blocks(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    one = "Run this:\n\n```python\nprint('hi')\n```\n"
    two = "First:\n\n```sh\nls -la\n```\n\nThen:\n\n```sh\npwd\n```\n"
    chat = seed_chat(store, "Code", [("show code", one), ("more", two)])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        await pilot.press("f5")  # newest message
        assert app.clipboard == two
        views = app.chat.chat_view.views()
        views[1].focus()  # the reply with one block
        await pilot.press("f3")
        assert app.clipboard == "print('hi')\n"
        views[3].focus()  # two blocks: choose
        await pilot.press("f3")
        await wait_for(pilot, lambda: isinstance(app.screen, PickScreen))
        await pilot.press("down", "enter")
        await wait_for(pilot, lambda: app.clipboard == "pwd\n")


async def test_copy_code_without_code_says_so(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    chat = seed_chat(store, "Prose", [("q", "plain words")])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        await pilot.press("f3")
        await pilot.pause()
        assert any("no code block" in n.message for n in app._notifications)


async def test_provenance_and_figures_toggle(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    reply = "The answer is 42."
    stats = {
        "tokens": 6,
        "seconds": 0.5,
        "tokens_per_s": 12.0,
        "steps": 3,
        "mat": 2.0,
        "speedup_est": 1.7,
        "accepted_by_drafter": {"dyn": 3, "static": 0, "tr": 0},
        "provenance": [[4, "plain"], [10, "dyn"], [3, "plain"]],
    }
    chat = seed_chat(store, "Stats", [("q", reply)], **stats)
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await app.chat.open_chat(chat)
        view = app.chat.chat_view.views()[-1]
        assert view.spans == [["The ", "plain"], ["answer is ", "dyn"], ["42.", "plain"]]
        figures = view.query_one(".msg-stats", Static)
        assert figures.styles.display == "none"
        await pilot.press("f6")
        await pilot.pause()
        assert app.chat.chat_view.has_class("-show-stats")
        assert figures.styles.display == "block"
        text = str(figures.render())
        assert "12.0 tok/s" in text and "MAT 2.00" in text and "speedup 1.70x" in text
        assert "dyn 50%" in text
        provenance = view.query_one(".msg-provenance", Static)
        assert provenance.styles.display == "none"
        await pilot.press("f9")
        await pilot.pause()
        assert provenance.styles.display == "block"
        assert view.query_one(".msg-body").styles.display == "none"
        assert app.query_one("#legend").display
        assert "dynamic SAM" in str(app.query_one("#legend", Static).render())
        await pilot.press("f9")
        await pilot.pause()
        assert provenance.styles.display == "none"


async def test_long_chat_mounts_only_recent_messages(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    turns = [(f"question {i}", f"answer {i} with **bold** text") for i in range(600)]
    with store.transaction():
        chat = seed_chat(store, "Long", turns)
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await app.chat.open_chat(chat)
        await pilot.pause()
        views = app.chat.chat_view.views()
        assert len(app.chat.chat_view.rows) == 1200
        # Only a page of views is mounted (what keeps opening a long chat quick; the time itself
        # is not asserted: machines differ).
        assert len(views) == app.chat.chat_view.page
        assert views[-1].content == "answer 599 with **bold** text"
        await pilot.press("ctrl+u")
        await pilot.pause()
        assert len(app.chat.chat_view.views()) == 2 * app.chat.chat_view.page
        assert app.chat.chat_view.views()[0].content == f"question {600 - app.chat.chat_view.page}"


async def test_keyboard_moves_between_messages_and_acts_on_one(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    stats = {
        "tokens": 5,
        "tokens_per_s": 7.5,
        "mat": 1.25,
        "speedup_est": 1.1,
        "accepted_by_drafter": {"dyn": 1},
        "finish_reason": "eos",
        "speed_trace": [5.0, 9.0, 7.0],
    }
    chat = seed_chat(
        store,
        "Nav",
        [("first question", "first answer"), ("second question", "second answer")],
        **stats,
    )
    app = make_app()
    async with app.run_test(size=(120, 36)) as pilot:
        await app.chat.open_chat(chat)
        app.chat.prompt.focus()
        await pilot.press("ctrl+up")
        assert isinstance(app.focused, MessageView) and app.focused.content == "second answer"
        # A finished reply shows its stored figures and speed trace in the stats bar.
        bar = str(app.query_one("#stats-text", Static).render())
        assert "7.5 tok/s" in bar and "MAT 1.25" in bar and "(stored)" in bar
        assert app.query_one("#stats-spark").display
        await pilot.press("up", "up")
        assert isinstance(app.focused, MessageView) and app.focused.content == "first answer"
        await pilot.press("c")
        assert app.clipboard == "first answer"
        await pilot.press("e")  # on a reply: edit the question it answers
        await wait_for(pilot, lambda: isinstance(app.screen, EditorScreen))
        assert app.screen.query_one("#dialog-editor").text == "first question"  # type: ignore[attr-defined]
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("down", "down", "down")
        assert app.focused is app.chat.prompt


async def test_chat_deleted_elsewhere_is_a_notice_not_a_crash(
    make_app: Callable[..., SamchatApp], store: Store
) -> None:
    chat = seed_chat(store, "Doomed elsewhere", [("q", "a")])
    app = make_app()
    async with app.run_test() as pilot:
        await app.chat.open_chat(chat)
        store.delete_chat(chat)  # another samchat process, e.g. `samchat history`
        for key in ("f2", "f8", "f4", "ctrl+r"):
            await pilot.press(key)
            await pilot.pause()
        assert app.is_running
        assert sum(f"no chat {chat}" in n.message for n in app._notifications) >= 2
        await pilot.press(*"still works", "enter")
        await wait_for(pilot, lambda: any("no chat" in n.message for n in app._notifications))
        assert app.is_running
