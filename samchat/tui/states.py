"""The app's state machines (StrEnum: each value is also its old string, as tests and logs use)."""

from __future__ import annotations

from enum import StrEnum


class ModelState(StrEnum):
    NONE = "none"  # nothing loaded, nothing loading
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"  # the last load failed and no model runs


class DataState(StrEnum):
    NONE = "none"  # not opened yet
    READY = "ready"
    FAILED = "failed"  # chats are not saved
