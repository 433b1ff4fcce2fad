"""Servers on real sockets that misbehave as remote servers do: one that never answers, one
that is not an OpenAI server at all, one that streams a word and then stalls, and one whose
model list is fine but whose chat replies are scripted (HTML, plain JSON, 403, or a short
stream that records what it was sent)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "stalling-model"


class _Quiet(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


class _Html(_Quiet):
    """A web page on every path: what a wrong URL usually reaches."""

    def _page(self) -> None:
        body = b"<html><body><h1>Welcome to nginx!</h1></body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _page
    do_POST = _page


class _Stalling(_Quiet):
    """Lists one model; a chat completion streams its first words, then waits until the
    server stops (a server stuck mid-reply)."""

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._stream([({"role": "assistant"}, None), ({"content": "Hello"}, None)])
        self._stream([({"content": " there"}, None)])
        self.server.server_stop.wait(60)  # type: ignore[attr-defined]

    def _stream(self, deltas: list[tuple[dict[str, str], str | None]]) -> None:
        """Chat-completion chunks as server-sent events (the headers with the first ones)."""
        if not getattr(self, "_streaming", False):
            self._streaming = True
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
        for delta, finish in deltas:
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()


class _Scripted(_Stalling):
    """The model list of _Stalling; a chat completion answers as `server.mode` says."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        self.server.requests.append(body)  # type: ignore[attr-defined]
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "sse":
            self._stream([({"content": "ok"}, None), ({}, "stop")])
            self.wfile.write(b"data: [DONE]\n\n")
            return
        status, kind, text = {
            "html": (200, "text/html", "<html><body>Sign in to continue</body></html>"),
            "json": (200, "application/json", json.dumps({"id": "x", "choices": []})),
            "forbidden": (
                403,
                "application/json",
                json.dumps({"error": {"message": "this key may not use the model"}}),
            ),
        }[mode]
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler], **state: object) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    for name, value in state.items():
        setattr(server, name, value)
    server.daemon_threads = True
    server.server_stop = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.server_stop.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def html_server() -> Iterator[str]:
    """host:port of a plain web server that is not an OpenAI API."""
    with _serving(_Html) as where:
        yield where


@contextmanager
def stalling_server() -> Iterator[str]:
    """host:port of an OpenAI-like server that stalls after its first words."""
    with _serving(_Stalling) as where:
        yield where


@contextmanager
def scripted_server(mode: str, requests: list[dict[str, object]]) -> Iterator[str]:
    """host:port of a server with one model whose chat replies are `mode`: "html", "json"
    (not streamed), "forbidden" (403) or "sse" (a two-chunk stream); each request's JSON body
    is appended to `requests`."""
    with _serving(_Scripted, mode=mode, requests=requests) as where:
        yield where


@contextmanager
def silent_port() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def closed_port() -> int:
    """A port nothing listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
