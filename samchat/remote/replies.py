"""Replies from a remote model, as the same events a local session streams: text as it comes,
then ReplyDone with tokens/s and time to first token. Drafting, if any, happens in the server,
so there are no drafter shares, MAT or speedup here, and the method is "remote"."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from samchat.decoding.events import Event, ReplyDone, ReplyStats, TextDelta
from samchat.decoding.params import SamplingParams, from_mapping
from samchat.remote import REMOTE
from samchat.remote.client import RemoteError, RemoteModel, async_client, explain

if TYPE_CHECKING:
    from samchat.corpus.retrieval import Fitted, Source

# finish reasons as samchat names them ("interrupted": the server broke off the stream)
FINISH = {"stop": "stop", "length": "length", "content_filter": "stop"}
POLL_S = 0.05  # how often a waiting read looks at the cancel flag
T = TypeVar("T")
CHARS_PER_TOKEN = 3  # fewer than most tokenizers average: fitting documents errs on the short side


class RemoteGenerator:
    """What a front end asks for replies when the model is remote (Generator's counterpart)."""

    def __init__(self, lm: RemoteModel) -> None:
        self.lm = lm
        self.indexer: Any = None  # no tokenizer here, so no static index to draft from

    def prepare(self) -> None:
        """Nothing to measure: the server decodes."""

    def fit_sources(
        self,
        history: list[dict[str, str]],
        question: str,
        sources: Sequence[Source],
        sampling: dict[str, Any],
    ) -> Fitted:
        """As many sources as the endpoint's context holds after `history`, counted by
        characters (the server's tokenizer is not here)."""
        from samchat.corpus.retrieval import fit

        params = from_mapping(SamplingParams, sampling)

        def count(text: str) -> int:
            return len(text) // CHARS_PER_TOKEN + 1

        def prompt_tokens(content: str) -> int:
            return sum(count(m["content"]) + 8 for m in [*history, {"content": content}])

        return fit(
            question,
            sources,
            prompt_tokens=prompt_tokens,
            count=count,
            limit=self.lm.context_limit - params.max_new_tokens,
        )

    def generate(
        self, messages: list[dict[str, str]], sampling: dict[str, Any], cancel: threading.Event
    ) -> Iterator[Event]:
        """Stream the reply; `cancel` drops the connection at once, even while the server is
        silent. A stream the server breaks off keeps its text (finish reason "interrupted",
        with a notice)."""
        params = from_mapping(SamplingParams, sampling)
        request: dict[str, Any] = {
            "model": self.lm.model_id,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},  # the server's own token count
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.seed is not None:
            request["seed"] = params.seed
        if params.stop:
            request["stop"] = list(params.stop)[:4]  # the API takes at most four
        if params.top_k:
            request["extra_body"] = {"top_k": params.top_k}  # llama.cpp, vLLM, samchat serve
        yield from _Reply(self.lm, request, cancel).events()


class _Cancelled(Exception):
    pass


async def _unless_cancelled(step: Awaitable[T], cancel: threading.Event) -> T:
    """`step`'s result, or _Cancelled as soon as `cancel` is set (the step is cancelled, which
    closes its connection)."""
    task = asyncio.ensure_future(step)
    task.add_done_callback(_retrieve)
    while not task.done():
        if cancel.is_set():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
            raise _Cancelled
        await asyncio.wait({task}, timeout=POLL_S)
    return task.result()


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a task's exception as seen: a Ctrl-C raised inside it is handled by the caller,
    and asyncio would otherwise print it again as "never retrieved"."""
    if not task.cancelled():
        task.exception()


class _Reply:
    """One streamed reply, on an event loop of its own in the caller's thread: the front ends
    iterate replies synchronously (the TUI in a worker thread), and only asyncio can drop a
    connection whose read is blocked."""

    def __init__(self, lm: RemoteModel, request: dict[str, Any], cancel: threading.Event) -> None:
        self.lm = lm
        self.request = request
        self.cancel = cancel

    def events(self) -> Iterator[Event]:
        loop = asyncio.new_event_loop()
        api = async_client(self.lm.endpoint)
        started = time.perf_counter()
        parts: list[str] = []
        chunks, first_at = 0, 0.0
        finish, notice, usage = "", "", None
        stream: Any = None

        def run(step: Awaitable[T]) -> T:
            task = loop.create_task(_unless_cancelled(step, self.cancel))
            task.add_done_callback(_retrieve)
            return loop.run_until_complete(task)

        try:
            try:
                stream = run(api.chat.completions.create(**self.request))
                chunk_iter = stream.__aiter__()
                while True:
                    try:
                        chunk = run(chunk_iter.__anext__())
                    except StopAsyncIteration:
                        break
                    usage = getattr(chunk, "usage", None) or usage
                    for choice in chunk.choices or ():
                        text = choice.delta.content if choice.delta is not None else None
                        if text:
                            parts.append(text)
                            chunks += 1
                            first_at = first_at or time.perf_counter()
                            yield TextDelta(text, [], [REMOTE], ((text, REMOTE),))
                        if choice.finish_reason:
                            finish = FINISH.get(choice.finish_reason, choice.finish_reason)
            except _Cancelled:
                finish = "cancelled"
            except Exception as exc:
                why = explain(exc, self.lm.endpoint, self.lm.model_id)
                if not parts:
                    raise RemoteError(why) from None
                finish = "interrupted"
                notice = f"the reply broke off ({why}); the partial reply is kept"
        finally:
            with contextlib.suppress(BaseException):
                # Whatever a Ctrl-C left running is cancelled first, its connection dropped.
                left = asyncio.all_tasks(loop)
                for task in left:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
                if stream is not None:
                    loop.run_until_complete(stream.close())
                loop.run_until_complete(api.close())
                loop.run_until_complete(loop.shutdown_default_executor())  # its DNS thread
            loop.close()
        if not finish:
            finish = "interrupted"
            notice = "the server ended the stream without a finish reason; it may be cut short"
        stats = _stats(started, chunks, first_at, usage)
        yield ReplyDone("".join(parts), finish, stats, notice)


def _stats(started: float, chunks: int, first_at: float, usage: Any) -> ReplyStats:
    """Tokens as the server counts them when it says (else one per streamed chunk), tokens/s
    after the first token, and the time to it."""
    tokens = int(getattr(usage, "completion_tokens", 0) or 0) or chunks
    seconds = time.perf_counter() - first_at if first_at else 0.0
    return ReplyStats(
        tokens=tokens,
        seconds=seconds,
        tokens_per_s=tokens / seconds if seconds > 0 else 0.0,
        steps=0,
        mat=0.0,
        speedup_est=0.0,
        ttft_s=first_at - started if first_at else 0.0,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        method=REMOTE,
    )
