"""The campaign's child programs, each one of samchat's real write paths, run as
`python -m fault_campaign.children.NAME DATA SEED [ARGS]` with scripts/ and the repository on
PYTHONPATH (process.Child.program). After each commit a child prints `ack KIND ID HASH`, so the
campaign knows what was committed when it kills it. Kept free of imports: each child loads only
what its own path needs."""
