"""A bearer-token front for a registry, on 127.0.0.1: it answers unauthenticated requests with
the distribution spec's ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` challenge,
issues tokens from its realm for the right basic credentials, and forwards requests carrying a
valid token to the real registry behind it."""

from __future__ import annotations

import base64
import json
import secrets
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class TokenProxy:
    """``check(user, password)``, when given, decides which basic credentials get a token
    (e.g. a GCP access token under the user ``oauth2accesstoken``)."""

    def __init__(
        self,
        upstream: str,
        user: str,
        password: str,
        check: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.user, self.password = user, password
        self.check = check
        self.tokens: set[str] = set()
        self.token_requests: list[dict[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, headers: dict[str, str], body: bytes = b"") -> None:
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _token(self) -> None:
                from urllib.parse import parse_qs, urlparse

                query = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
                proxy.token_requests.append(query)
                auth = self.headers.get("Authorization", "")
                try:
                    user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                except ValueError:
                    user = password = ""
                check = proxy.check or (lambda u, p: (u, p) == (proxy.user, proxy.password))
                if not auth.startswith("Basic ") or not check(user, password):
                    self._send(401, {})
                    return
                token = secrets.token_hex(16)
                proxy.tokens.add(token)
                self._send(
                    200, {"Content-Type": "application/json"}, json.dumps({"token": token}).encode()
                )

            def _body(self) -> bytes | None:
                """The request body, whether sized or chunked (dockerd uploads in chunks)."""
                if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                    parts = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            self.rfile.readline()
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else None

            def _proxy(self) -> None:
                if self.path.startswith("/token"):
                    self._token()
                    return
                auth = self.headers.get("Authorization", "")
                if not (auth.startswith("Bearer ") and auth[7:] in proxy.tokens):
                    host = f"127.0.0.1:{proxy.port}"
                    repo = self.path.split("/")[2] if self.path.count("/") > 2 else ""
                    self._send(
                        401,
                        {
                            "WWW-Authenticate": f'Bearer realm="http://{host}/token",service="test",'
                            f'scope="repository:{repo}:pull,push"'
                        },
                    )
                    return
                body = self._body()
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower()
                    not in ("authorization", "host", "content-length", "transfer-encoding")
                }
                if body is not None and not any(k.lower() == "content-type" for k in headers):
                    # urllib would otherwise call the body a form
                    headers["Content-Type"] = "application/octet-stream"
                req = urllib.request.Request(
                    proxy.upstream + self.path, data=body, headers=headers, method=self.command
                )
                try:
                    with urllib.request.urlopen(req, timeout=30) as resp:
                        code, rheaders, rbody = resp.status, dict(resp.headers), resp.read()
                except urllib.error.HTTPError as e:
                    code, rheaders, rbody = e.code, dict(e.headers), e.read()
                rheaders = {
                    k: v.replace(proxy.upstream, f"http://127.0.0.1:{proxy.port}")
                    for k, v in rheaders.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "connection")
                }
                self._send(code, rheaders, rbody)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _proxy

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
