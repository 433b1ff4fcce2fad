"""The chat layer every front end shares (TUI, `samchat ask`, later the server); no textual.

`record`: what is stored for a reply, built from the engine's events the same way everywhere;
`backend`: the store, model loading, decoding and import as a chat front end uses them;
`config`: config.toml; `live_stats`: running figures of a streaming reply.
"""
