"""A webhook receiver on 127.0.0.1: every POST's JSON body and when it came; ``fail`` makes it
answer ``fail_status`` (500: a webhook that is down), with ``retry_after`` as its Retry-After; ``answers`` maps a path to the status (and ``Location``)
it answers there (a redirect); ``delay`` holds every POST that long before answering (a slow
webhook); every request's method, path and headers (names lower-cased) are kept."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    def __init__(self) -> None:
        self.posts: list[tuple[float, str, Any]] = []
        self.fail = False
        self.fail_status = 500
        self.retry_after: str | None = None  # sent with a failing answer
        self.url = ""
        self.answers: dict[str, tuple[int, str | None]] = {}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.delay = 0.0

    def keys(self) -> list[str]:
        """The ``Idempotency-Key`` of every POST, in the order they came."""
        return [h.get("idempotency-key", "") for m, _, h in self.requests if m == "POST"]

    def bodies(self) -> list[Any]:
        return [body for _, _, body in self.posts]


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            receiver.requests.append(
                ("POST", self.path, {k.lower(): v for k, v in self.headers.items()})
            )
            if receiver.delay:
                time.sleep(receiver.delay)
            status, location = receiver.answers.get(self.path, (200, None))
            if status == 200:
                receiver.posts.append((time.time(), self.path, json.loads(raw or b"null")))
            self.send_response(receiver.fail_status if receiver.fail else status)
            if receiver.fail and receiver.retry_after is not None:
                self.send_header("Retry-After", receiver.retry_after)
            if location:
                self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            receiver.requests.append(
                ("GET", self.path, {k.lower(): v for k, v in self.headers.items()})
            )
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T0-SECRET-PATH"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
