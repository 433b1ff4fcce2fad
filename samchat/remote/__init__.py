"""Models on OpenAI-compatible servers (`--model openai:URL`): the server decodes, samchat keeps
the chat, its history, documents and statistics."""

# The method of a remote reply and the source of each of its tokens: drafting, if any, happens
# in the server, so there is no drafter to name.
REMOTE = "remote"
