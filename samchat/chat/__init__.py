"""The chat layer every front end shares (TUI, `samchat ask`, later the server); no textual.

`record`: what is stored for a reply, built from the engine's events the same way everywhere.
"""
