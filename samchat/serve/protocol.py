"""OpenAI's chat-completions protocol: requests parsed and checked, replies and errors shaped.

No starlette and no torch here: plain data in, plain data out. Sampling values are checked by
SamplingParams' knobs (samchat/decoding/params.py), which hold their defaults and ranges.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, NotRequired, TypedDict

from samchat.decoding.knobs import KnobError, from_mapping
from samchat.decoding.params import SamplingParams
from samchat.messages import Message

if TYPE_CHECKING:
    from samchat.decoding.events import ReplyDone


MAX_BODY_BYTES = 4 * 1024 * 1024  # a request body larger than this gets 413
MAX_MESSAGES = 2048  # a conversation longer than this gets 413

# Names a request may use for the one loaded model, besides its own name.
MODEL_ALIASES = ("samchat", "default")

# samchat's finish reasons as OpenAI names them (cancelled never reaches a client as a reply).
FINISH = {"eos": "stop", "stop": "stop", "length": "length", "context": "length"}

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class ApiError(Exception):
    """A request the server refuses, with its HTTP status and OpenAI's error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind

    def body(self) -> ErrorBody:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


# A request's JSON object, as parsed: each field is checked where it is read.
JsonObject = dict[str, object]


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(TypedDict):
    error: ErrorDetail


class ModelEntry(TypedDict):
    id: str
    object: str
    created: int
    owned_by: str


class TokenDetails(TypedDict):
    cached_tokens: int


class Usage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: TokenDetails


class Figures(TypedDict):
    """samchat's own figures for a reply: the extra `samchat` field of a response."""

    tokens_per_s: float
    mat: float
    speedup_est: float
    accepted_by_drafter: dict[str, float]
    method: str
    reused_tokens: int
    prompt_tokens: int
    tokens: int
    steps: int
    prefill_s: float
    ttft_s: float
    decode_s: float
    finish_reason: str
    notice: NotRequired[str]
    chat_id: NotRequired[int]


class ReplyMessage(TypedDict):
    role: str
    content: str


class Choice(TypedDict):
    index: int
    message: ReplyMessage
    logprobs: None
    finish_reason: str


class Completion(TypedDict):
    id: str
    object: str
    created: int
    model: str
    choices: list[Choice]
    usage: Usage
    samchat: Figures


@dataclass
class ChatRequest:
    messages: list[Message]
    params: SamplingParams
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage


def parse_json(body: bytes) -> JsonObject:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ApiError(400, "the request body must be a JSON object")
    out: JsonObject = data
    return out


def check_model(requested: object, loaded: str) -> None:
    """404 unless `requested` names the loaded model (case aside) or is an alias of it."""
    if not isinstance(requested, str) or not requested:
        raise ApiError(400, "'model' is required: a model name", param="model")
    name = requested.lower()
    if name != loaded.lower() and name not in MODEL_ALIASES:
        raise ApiError(
            404,
            f"the model {requested!r} does not exist; this server runs {loaded!r}",
            param="model",
            code="model_not_found",
        )


def _text(content: object, where: str) -> str:
    """A message's content: a string, or a list of text parts (joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise ApiError(400, f"{where}: only text content parts are supported", param=where)
            text = part.get("text")
            if not isinstance(text, str):
                raise ApiError(400, f"{where}: a text part needs a string 'text'", param=where)
            parts.append(text)
        return "".join(parts)
    raise ApiError(400, f"{where}: 'content' must be a string or a list of text parts", param=where)


def parse_messages(raw: object) -> list[Message]:
    if raw is None:
        raise ApiError(400, "'messages' is required: a list of messages", param="messages")
    if not isinstance(raw, list) or not raw:
        raise ApiError(400, "'messages' must be a non-empty list", param="messages")
    if len(raw) > MAX_MESSAGES:
        raise ApiError(
            413, f"too many messages ({len(raw)}); at most {MAX_MESSAGES}", param="messages"
        )
    out: list[Message] = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise ApiError(400, f"{where} must be an object", param=where)
        role = message.get("role")
        role = ROLES.get(role) if isinstance(role, str) else None
        if role is None:
            known = ", ".join(ROLES)
            raise ApiError(400, f"{where}: 'role' must be one of {known}", param=where)
        out.append({"role": role, "content": _text(message.get("content"), where)})
    if out[-1]["role"] != "user":
        raise ApiError(400, "the last message must be the user's", param="messages")
    return out


def _max_tokens(data: JsonObject, context_limit: int) -> tuple[str, object]:
    for name in ("max_completion_tokens", "max_tokens"):
        value = data.get(name)
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= context_limit:
            raise ApiError(
                400,
                f"{name} is {value}, beyond the model's context of {context_limit} tokens",
                param=name,
                code="context_length_exceeded",
            )
        return name, value
    return "", None


def parse_chat(data: JsonObject, context_limit: int) -> ChatRequest:
    """The checked request, or ApiError (400/413) naming the bad field."""
    messages = parse_messages(data.get("messages"))
    if data.get("n") not in (None, 1):
        raise ApiError(400, "only n = 1 is supported", param="n")
    stream = data.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be true or false", param="stream")
    options = data.get("stream_options") or {}
    if not isinstance(options, dict):
        raise ApiError(400, "'stream_options' must be an object", param="stream_options")
    # OpenAI's names for SamplingParams' knobs; an absent or null field keeps the knob's default.
    tokens_name, tokens = _max_tokens(data, context_limit)
    values: JsonObject = {"max_new_tokens": tokens}
    for name in ("temperature", "top_p", "top_k", "seed"):
        values[name] = data.get(name)
    stop = data.get("stop")
    values["stop"] = [stop] if isinstance(stop, str) else stop
    given = {k: v for k, v in values.items() if v is not None}
    try:
        params = from_mapping(SamplingParams, given)
    except KnobError as exc:
        name = tokens_name if exc.knob.name == "max_new_tokens" else exc.knob.name
        raise ApiError(400, f"{name} {exc.problem}", param=name) from None
    return ChatRequest(messages, params, bool(stream), bool(options.get("include_usage")))


# -- replies --------------------------------------------------------------------------------


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def model_entry(name: str) -> ModelEntry:
    return {"id": name, "object": "model", "created": 0, "owned_by": "samchat"}


def usage(done: ReplyDone) -> Usage:
    s = done.stats
    return {
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.tokens,
        "total_tokens": s.prompt_tokens + s.tokens,
        "prompt_tokens_details": {"cached_tokens": s.reused_tokens},
    }


def figures(done: ReplyDone, chat_id: int | None) -> Figures:
    """samchat's own figures for a reply: the extra `samchat` field of a response."""
    s = done.stats
    out: Figures = {
        "tokens_per_s": round(s.tokens_per_s, 2),
        "mat": round(s.mat, 3),
        "speedup_est": round(s.speedup_est, 3),
        "accepted_by_drafter": dict(s.accepted_by_drafter),
        "method": s.method,
        "reused_tokens": s.reused_tokens,
        "prompt_tokens": s.prompt_tokens,
        "tokens": s.tokens,
        "steps": s.steps,
        "prefill_s": round(s.prefill_s, 4),
        "ttft_s": round(s.ttft_s, 4),
        "decode_s": round(s.seconds, 4),
        "finish_reason": done.finish_reason,
    }
    if done.notice:
        out["notice"] = done.notice
    if chat_id is not None:
        out["chat_id"] = chat_id
    return out


def completion(rid: str, model: str, done: ReplyDone, chat_id: int | None) -> Completion:
    return {
        "id": rid,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": done.text},
                "logprobs": None,
                "finish_reason": FINISH.get(done.finish_reason, "stop"),
            }
        ],
        "usage": usage(done),
        "samchat": figures(done, chat_id),
    }


def chunk(rid: str, model: str, delta: dict[str, str], **extra: object) -> str:
    """One streamed chunk as the SSE data line's JSON."""
    finish = extra.pop("finish_reason", None)
    body: dict[str, object] = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        **extra,
    }
    return json.dumps(body, ensure_ascii=False)


def usage_chunk(rid: str, model: str, done: ReplyDone) -> str:
    """The last chunk when stream_options.include_usage is set: no choices, the usage."""
    body = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [],
        "usage": usage(done),
    }
    return json.dumps(body)
