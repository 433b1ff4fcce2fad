"""Replies from a remote model, as the same events a local session streams: text as it comes,
then ReplyDone with tokens/s and time to first token. Drafting, if any, happens in the server,
so there are no drafter shares, MAT or speedup here, and the method is "remote"."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from samchat.decoding.context_fit import drop_oldest_turn, dropped_notice
from samchat.decoding.events import Event, ReplyDone, ReplyStats, TextDelta
from samchat.decoding.params import SamplingParams
from samchat.errors import SamchatError
from samchat.messages import Message
from samchat.remote import REMOTE
from samchat.remote.aio import Cancelled, PrivateLoop
from samchat.remote.client import RemoteError, RemoteModel, async_client, explain, not_openai

if TYPE_CHECKING:
    from samchat.corpus.indexing import BackgroundIndexer
    from samchat.corpus.retrieval import Fitted, Source

# finish reasons as samchat names them ("interrupted": the server broke off the stream)
FINISH = {"stop": "stop", "length": "length"}  # others ("content_filter"...) as the server says
CHARS_PER_TOKEN = 3  # fewer than most tokenizers average: fitting documents errs on the short side


MAX_STOP = 4  # stop strings the OpenAI API takes


def _count(text: str) -> int:
    """Tokens, estimated high from characters (the server's tokenizer is not here)."""
    return len(text) // CHARS_PER_TOKEN + 1


class RemoteGenerator:
    """What a front end asks for replies when the model is remote (Generator's counterpart)."""

    def __init__(self, lm: RemoteModel) -> None:
        self.lm = lm
        # No tokenizer here, so no static index to draft from.
        self.indexer: BackgroundIndexer | None = None

    def prepare(self) -> None:
        """Nothing to measure: the server decodes."""

    def curve_missing(self) -> bool:
        return False

    def measure_cost_curve(self, cancelled: Callable[[], bool] | None = None) -> None:
        """Nothing to measure: the server decodes."""

    def fit_sources(
        self,
        history: list[Message],
        question: str,
        sources: Sequence[Source],
        sampling: SamplingParams,
    ) -> Fitted:
        """As many sources as the endpoint's context holds after `history`, counted by
        characters (the server's tokenizer is not here)."""
        from samchat.corpus.retrieval import fit

        def prompt_tokens(content: str) -> int:
            return sum(_count(m["content"]) + 8 for m in [*history, {"content": content}])

        return fit(
            question,
            sources,
            prompt_tokens=prompt_tokens,
            count=_count,
            limit=self.lm.context_limit - sampling.max_new_tokens,
        )

    def _fit(self, messages: list[Message], max_new_tokens: int) -> tuple[list[Message], str]:
        """The messages without the oldest non-system turns that the endpoint's context cannot
        hold beside the reply (counted as fit_sources counts), and the notice a local session
        gives for the same."""
        msgs = list(messages)
        room = self.lm.context_limit - max_new_tokens

        def size() -> int:
            return sum(_count(m.get("content", "")) + 8 for m in msgs)

        dropped = 0
        while size() > room:
            gone = drop_oldest_turn(msgs)
            if not gone:
                raise RemoteError(
                    f"the message is too long for {self.lm.endpoint.label}'s context (about "
                    f"{size()} tokens, limit {self.lm.context_limit} incl. {max_new_tokens} for "
                    "the reply); shorten it, or set context in the endpoint's entry"
                )
            dropped += gone
        return msgs, dropped_notice(dropped)

    def generate(
        self, messages: list[Message], sampling: SamplingParams, cancel: threading.Event
    ) -> Iterator[Event]:
        """Stream the reply; `cancel` drops the connection at once, even while the server is
        silent. A stream the server breaks off keeps its text (finish reason "interrupted",
        with a notice)."""
        params = sampling  # checked when made: the server would take what samchat refuses
        if len(params.stop) > MAX_STOP:
            raise RemoteError(
                f"the OpenAI API takes at most {MAX_STOP} stop strings and {len(params.stop)} "
                "are set; give fewer"
            )
        sent, dropped = self._fit(messages, params.max_new_tokens)
        request: dict[str, Any] = {
            "model": self.lm.model_id,
            "messages": sent,
            "stream": True,
            "stream_options": {"include_usage": True},  # the server's own token count
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.seed is not None:
            request["seed"] = params.seed
        if params.stop:
            request["stop"] = list(params.stop)
        if params.top_k:
            request["extra_body"] = {"top_k": params.top_k}  # llama.cpp, vLLM, samchat serve
        for event in _Reply(self.lm, request, cancel).events():
            if isinstance(event, ReplyDone) and dropped:
                notice = f"{dropped}; {event.notice}" if event.notice else dropped
                event = ReplyDone(event.text, event.finish_reason, event.stats, notice)
            yield event


class _Reply:
    """One streamed reply, on a private event loop in the caller's thread: the front ends
    iterate replies synchronously (the TUI in a worker thread), and only asyncio can drop a
    connection whose read is blocked."""

    def __init__(self, lm: RemoteModel, request: dict[str, Any], cancel: threading.Event) -> None:
        self.lm = lm
        self.request = request
        self.cancel = cancel

    def _fault(self, exc: BaseException) -> str:
        return explain(exc, self.lm.endpoint, self.lm.model_id)

    def events(self) -> Iterator[Event]:
        started = time.perf_counter()
        parts: list[str] = []
        chunks, first_at = 0, 0.0
        finish, notice, usage = "", "", None
        with PrivateLoop() as aio:
            try:
                api = async_client(self.lm.endpoint)
                aio.closing(api.close)
                stream = aio.run(api.chat.completions.create(**self.request), self.cancel.is_set)
                aio.closing(stream.close)
                if "event-stream" not in stream.response.headers.get("content-type", ""):
                    raise RemoteError(not_openai(self.lm.endpoint))
                chunk_iter = stream.__aiter__()
                while True:
                    try:
                        chunk = aio.run(chunk_iter.__anext__(), self.cancel.is_set)
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
            except Cancelled:
                finish = "cancelled"
            except SamchatError:
                raise
            except Exception as exc:
                if not parts:
                    raise RemoteError(self._fault(exc)) from None
                if not finish:  # a drop after the last words and the finish reason loses nothing
                    finish = "interrupted"
                    notice = f"the reply broke off ({self._fault(exc)}); the partial reply is kept"
        if not finish:
            if not parts:  # events, but none an OpenAI server sends
                raise RemoteError(not_openai(self.lm.endpoint))
            finish = "interrupted"
            notice = "the server ended the stream without a finish reason; it may be cut short"
        stats = _stats(started, chunks, first_at, usage)
        yield ReplyDone("".join(parts), finish, stats, notice)


def _stats(started: float, chunks: int, first_at: float, usage: object) -> ReplyStats:
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
