"""A webhook receiver on 127.0.0.1: every POST's JSON body and when it came; ``fail`` makes it
answer 500 (a webhook that is down)."""

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
        self.url = ""

    def bodies(self) -> list[Any]:
        return [body for _, _, body in self.posts]


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    receiver = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            receiver.posts.append((time.time(), self.path, json.loads(raw or b"null")))
            self.send_response(500 if receiver.fail else 200)
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
