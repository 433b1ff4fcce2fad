"""The HTTP side: OpenAI's routes as a Starlette app over one EngineWorker."""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from samchat.decoding.events import TextDelta
from samchat.serve import protocol
from samchat.serve.protocol import MAX_BODY_BYTES, ApiError
from samchat.serve.worker import EngineWorker, Finished, Item, Job

T = TypeVar("T")


def _cancelled() -> ApiError:
    """A running reply cancelled by the shutdown (a client that left gets nothing)."""
    return ApiError(
        503, "the reply was cancelled: the server is shutting down", kind="server_error"
    )


class ServeApp:
    """The routes' state: the worker, the model's name and context, the API key."""

    def __init__(
        self, worker: EngineWorker, model: str, context_limit: int, api_key: str | None
    ) -> None:
        self.worker = worker
        self.model = model
        self.context_limit = context_limit
        self.api_key = api_key

    def starlette(self) -> Starlette:
        routes = [
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{name:path}", self.one_model, methods=["GET"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
        ]
        handlers: Any = {ApiError: _api_error, HTTPException: _http_error, 500: _server_error}
        return Starlette(routes=routes, exception_handlers=handlers)

    def _authorize(self, request: Request) -> None:
        if self.api_key is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), self.api_key.encode()
        ):
            raise ApiError(
                401,
                "missing or wrong API key; send it as 'Authorization: Bearer KEY'",
                code="invalid_api_key",
            )

    async def models(self, request: Request) -> Response:
        self._authorize(request)
        return JSONResponse({"object": "list", "data": [protocol.model_entry(self.model)]})

    async def one_model(self, request: Request) -> Response:
        self._authorize(request)
        protocol.check_model(request.path_params["name"], self.model)
        return JSONResponse(protocol.model_entry(self.model))

    async def chat(self, request: Request) -> Response:
        self._authorize(request)
        data = protocol.parse_json(await _read_body(request))
        protocol.check_model(data.get("model"), self.model)
        req = protocol.parse_chat(data, self.context_limit)
        job = Job(req.messages, req.params, req.stream)
        self.worker.submit(job)
        rid = protocol.completion_id()
        if not req.stream:
            finished = await _unless_gone(request, job, _finish(job))
            if finished is None:  # the client left; nobody reads this
                return Response(status_code=499)
            body = protocol.completion(rid, self.model, finished.done, finished.chat_id)
            return JSONResponse(body)
        # The first event before the headers: an error still gets its status code.
        first = await _unless_gone(request, job, job.events.get())
        if first is None:
            return Response(status_code=499)
        if isinstance(first, ApiError):
            raise first
        if isinstance(first, Finished) and first.done.finish_reason == "cancelled":
            raise _cancelled()
        stream = _chunks(job, first, rid, self.model, req.include_usage)
        return EventSourceResponse(stream, sep="\n")


async def _read_body(request: Request) -> bytes:
    """The body, or 413 past MAX_BODY_BYTES (the rest is read and dropped, so the client
    gets the answer rather than a reset connection)."""
    parts: list[bytes] = []
    size = 0
    async for part in request.stream():
        size += len(part)
        if size <= MAX_BODY_BYTES:
            parts.append(part)
    if size > MAX_BODY_BYTES:
        raise ApiError(413, f"the request body is over {MAX_BODY_BYTES} bytes", code="too_large")
    return b"".join(parts)


async def _finish(job: Job) -> Finished:
    while True:
        item = await job.events.get()
        if isinstance(item, ApiError):
            raise item
        if isinstance(item, Finished):
            if item.done.finish_reason == "cancelled":
                raise _cancelled()
            return item


async def _disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_gone(request: Request, job: Job, waited: Awaitable[T]) -> T | None:
    """`waited`'s result, or None when the client disconnects first (the job is cancelled:
    dropped if queued, stopped at its next step if running)."""
    task = asyncio.ensure_future(waited)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    job.cancel.set()
    return None


async def _chunks(
    job: Job, first: TextDelta | Finished, rid: str, model: str, include_usage: bool
) -> AsyncIterator[str]:
    """The SSE data lines of a streamed reply. Closed early (the client left, the server
    stops), it cancels the job, which frees the engine at its next step."""
    try:
        item: Item = first
        delta: dict[str, str] = {"role": "assistant", "content": ""}
        while True:
            if isinstance(item, TextDelta):
                # Deltas that piled up while the last chunk was sent go out as one chunk.
                text = item.text
                after: Item | None = None
                while after is None and not job.events.empty():
                    queued = job.events.get_nowait()
                    if isinstance(queued, TextDelta):
                        text += queued.text
                    else:
                        after = queued
                delta["content"] = text
                yield protocol.chunk(rid, model, delta)
                delta = {"content": ""}
                item = after if after is not None else await job.events.get()
                continue
            if isinstance(item, ApiError):
                yield json.dumps(item.body())
                return
            if item.done.finish_reason == "cancelled":
                yield json.dumps(_cancelled().body())
                return
            finish = protocol.FINISH.get(item.done.finish_reason, "stop")
            figures = protocol.figures(item.done, item.chat_id)
            yield protocol.chunk(rid, model, {}, finish_reason=finish, samchat=figures)
            if include_usage:
                yield protocol.usage_chunk(rid, model, item.done)
            yield "[DONE]"
            return
    finally:
        job.cancel.set()


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return JSONResponse(exc.body(), status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = ApiError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}")
    return JSONResponse(error.body(), status_code=exc.status_code)


async def _server_error(request: Request, exc: Exception) -> Response:
    """A bug: still OpenAI's shape for the client (uvicorn logs the traceback)."""
    error = ApiError(500, f"internal error: {type(exc).__name__}", kind="server_error")
    return JSONResponse(error.body(), status_code=500)
