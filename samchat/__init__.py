"""samchat: a terminal chat app for local LLMs with lossless speculative decoding."""

__version__ = "0.1.0"
