"""The chat layer every front end shares (the TUI, `samchat ask`, `samchat serve`); no textual.

`service`: the turns of a chat over the store; `record`: what is stored for a reply, built from
the engine's events the same way everywhere; `opening`: the model a front end asks for;
`generator`: what replies come from; `documents`: the static index's indexer, a question's
sources, importing files; `config`: config.toml; `live_stats`: running figures of a streaming
reply. A reply's record itself (StoredStats) is samchat.figures', shared with the store.
"""
