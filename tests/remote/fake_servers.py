"""Servers on real sockets that misbehave as remote servers do: one that never answers, one
that is not an OpenAI server at all, and one that streams a word and then stalls."""

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
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for delta in ({"role": "assistant"}, {"content": "Hello"}, {"content": " there"}):
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.server.server_stop.wait(60)  # type: ignore[attr-defined]


@contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
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
