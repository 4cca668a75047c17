"""A fake OpenAI-compatible chat server on 127.0.0.1, for testing extraction without a provider.

It listens on a real socket and plays scripted replies in order: an answer, an
HTTP error (429, 500), or an answer after a delay (to trip a client timeout).
A ``responder`` function can build replies from each request instead. Point a
model at it with ``model="openai/<any name>"`` and ``api_base=server.base_url``::

    with FakeChatServer([Reply('{"facts": []}'), Reply(status=429), ...]) as server:
        settings = Settings(model="openai/fake", api_base=server.base_url, api_key="test")
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted reply: ``content`` with status 200, or an error ``status``; after ``delay`` s."""

    content: str = ""
    status: int = 200
    delay: float = 0.0
    prompt_tokens: int = 100
    completion_tokens: int = 20


Responder = Callable[[dict[str, Any]], Reply]


class FakeChatServer:
    """Scripted replies in order; the last one repeats when ``repeat_last`` (e.g. a 500 forever)."""

    def __init__(self, replies: Sequence[Reply] = (), *, responder: Responder | None = None,
                 repeat_last: bool = False) -> None:
        self._replies = list(replies)
        self._responder = responder
        self._repeat_last = repeat_last
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None, "server not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def next_reply(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._replies:
                if len(self._replies) == 1 and self._repeat_last:
                    return self._replies[0]
                return self._replies.pop(0)
        if self._responder is not None:
            return self._responder(request)
        return Reply(status=500, content="no scripted reply left")

    def start(self) -> FakeChatServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="fake-chat-server",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeChatServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def completion_body(reply: Reply, model: str) -> dict[str, Any]:
    """An OpenAI chat completion object carrying ``reply.content``."""
    return {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply.content}}],
        "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                  "total_tokens": reply.prompt_tokens + reply.completion_tokens},
    }


def _handler_for(fake: FakeChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                request = orjson.loads(self.rfile.read(length) or b"{}")
            except orjson.JSONDecodeError:
                request = {}
            if not self.path.rstrip("/").endswith("/chat/completions"):
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            reply = fake.next_reply(request if isinstance(request, dict) else {})
            if reply.delay:
                time.sleep(reply.delay)
            if reply.status != 200:
                return self._send(reply.status, {"error": {
                    "message": reply.content or f"scripted error {reply.status}",
                    "type": "fake_error", "code": reply.status}})
            self._send(200, completion_body(reply, str(request.get("model", "fake"))))

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = orjson.dumps(body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout)
                pass

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``fake.requests`` instead of the access log."""

    return Handler
