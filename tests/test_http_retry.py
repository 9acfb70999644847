"""The one HTTP retry policy, against a real HTTP server on 127.0.0.1 that answers 503 (with
``Retry-After: 0``) a given number of times before it answers for real: the registry client and
the package index pages ride through it; a POST is not repeated; a server that keeps failing
gives its last answer, not an exception."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from torchx_nb import http_retry


class Flaky:
    """Answers ``failures`` 503s, then ``body`` (200) to every GET; records each request."""

    def __init__(
        self,
        failures: int,
        body: bytes = b"{}",
        ctype: str = "application/json",
        retry_after: str = "0",
    ):
        self.failures = failures
        self.seen: list[str] = []
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                flaky.seen.append(f"{self.command} {self.path}")
                if flaky.failures > 0:
                    flaky.failures -= 1
                    self.send_response(503)
                    self.send_header("Retry-After", retry_after)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky() -> Iterator[list[Flaky]]:
    made: list[Flaky] = []
    yield made
    for f in made:
        f.stop()


def test_the_registry_client_rides_through_transient_answers(flaky: list[Flaky]) -> None:
    from torchx_nb.workspace.registry import RegistryClient

    server = Flaky(2)
    flaky.append(server)
    client = RegistryClient(server.url.removeprefix("http://"), insecure=True)
    resp = client.request("GET", "/v2/")
    assert resp.status_code == 200
    assert server.seen == ["GET /v2/"] * 3


def test_a_registry_that_keeps_failing_gives_its_last_answer(flaky: list[Flaky]) -> None:
    from torchx_nb.workspace.registry import RegistryClient

    server = Flaky(100)
    flaky.append(server)
    client = RegistryClient(server.url.removeprefix("http://"), insecure=True)
    assert client.request("GET", "/v2/").status_code == 503
    assert len(server.seen) == http_retry.TRIES


def test_a_post_is_sent_once(flaky: list[Flaky]) -> None:
    server = Flaky(1)
    flaky.append(server)
    resp = http_retry.session().post(f"{server.url}/v2/x/blobs/uploads/", timeout=10)
    assert resp.status_code == 503
    assert server.seen == ["POST /v2/x/blobs/uploads/"]


def test_an_index_page_that_answers_503_once_is_still_read(flaky: list[Flaky]) -> None:
    from torchx_nb.environment.index import IndexSettings
    from torchx_nb.environment.index_pages import listings

    page = b'<a href="/files/demo-1.0-py3-none-any.whl#sha256=' + b"a" * 64 + b'">w</a>'
    server = Flaky(1, page, "text/html")
    flaky.append(server)
    (found,) = listings(IndexSettings(f"{server.url}/simple"), "demo")
    assert found.state == "listed", found
    assert [f.filename for f in found.files] == ["demo-1.0-py3-none-any.whl"]
    assert server.seen == ["GET /simple/demo/"] * 2


def test_a_retry_after_longer_than_the_cap_is_the_answer_now(flaky: list[Flaky]) -> None:
    """A registry asking for an hour's wait: its 503 at once (urllib3 alone slept 3600 s per
    try, three times, inside a push), one request."""
    import time

    from torchx_nb.workspace.registry import RegistryClient

    server = Flaky(100, retry_after="3600")
    flaky.append(server)
    client = RegistryClient(server.url.removeprefix("http://"), insecure=True)
    started = time.monotonic()
    assert client.request("GET", "/v2/").status_code == 503
    assert time.monotonic() - started < 20
    assert server.seen == ["GET /v2/"]


def test_a_retry_after_within_the_cap_is_honoured(flaky: list[Flaky]) -> None:
    import time

    server = Flaky(1, retry_after="2")
    flaky.append(server)
    started = time.monotonic()
    assert http_retry.session().get(f"{server.url}/v2/", timeout=10).status_code == 200
    assert time.monotonic() - started >= 2
    assert server.seen == ["GET /v2/"] * 2


@pytest.mark.parametrize("retry_after", ["soon", "in a minute"])
def test_a_retry_after_that_is_no_time_is_paced_by_the_backoff(
    flaky: list[Flaky], retry_after: str
) -> None:
    """Neither seconds nor a date: the registry's answer, retried by the backoff alone — it
    was urllib3's InvalidHeader raised out of the request (a traceback, not 'HTTP 503')."""
    from torchx_nb.workspace.registry import RegistryClient

    server = Flaky(1, retry_after=retry_after)
    flaky.append(server)
    client = RegistryClient(server.url.removeprefix("http://"), insecure=True)
    assert client.request("GET", "/v2/").status_code == 200
    assert server.seen == ["GET /v2/"] * 2
    server.failures = 100
    server.seen.clear()
    assert client.request("GET", "/v2/").status_code == 503
    assert len(server.seen) == http_retry.TRIES


def test_an_index_page_asking_for_a_day_is_unreachable_at_once(flaky: list[Flaky]) -> None:
    import time

    from torchx_nb.environment.index import IndexSettings
    from torchx_nb.environment.index_pages import listings

    server = Flaky(100, b"", "text/html", retry_after="86400")
    flaky.append(server)
    started = time.monotonic()
    (found,) = listings(IndexSettings(f"{server.url}/simple"), "demo")
    assert (found.state, found.detail) == ("unreachable", "HTTP 503")
    assert time.monotonic() - started < 20
