"""Fetching URL and git requirements (environment/direct.py), against real git and real HTTP
servers on 127.0.0.0/8: credentials never reach another host, and hostile names and
subdirectories stay inside the folders they belong to."""

from __future__ import annotations

import contextlib
import http.server
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from torchx_nb.environment.direct import _checkout, fetch, parse_direct
from torchx_nb.environment.index import IndexSettings
from torchx_nb.specs import TorchxNbError


@contextlib.contextmanager
def _serve(host: str, handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    server = http.server.ThreadingHTTPServer((host, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_git_redirect_to_another_host_gets_no_credentials(tmp_path: Path) -> None:
    """A git server that redirects to another host: git followed the initial redirect, took
    the other host as the base URL, and sent it the header that carries the credentials with
    every later request. With credentials, no redirect is followed."""
    seen: list[str | None] = []

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            # a dumb git server's answers: git goes on to ask for HEAD and the objects
            refs = self.path.split("?")[0].endswith("/info/refs")
            body = b"a" * 40 + b"\trefs/heads/main\n" if refs else b"ref: refs/heads/main\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with _serve("127.0.0.2", Other) as other:
        target = f"http://127.0.0.2:{other}"

        class Redirect(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", f"{target}{self.path}")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        with _serve("127.0.0.1", Redirect) as port:
            ref = parse_direct(f"git+http://u:s3cret@127.0.0.1:{port}/r.git#egg=x")
            with pytest.raises(TorchxNbError) as e:
                _checkout(ref, "req.txt", tmp_path)
            assert "s3cret" not in str(e.value)
    assert not [h for h in seen if h], seen  # the other host never gets the credentials


def test_a_file_name_or_subdirectory_that_leaves_its_folder_is_one_line(tmp_path: Path) -> None:
    """`..%2F` in a download's file name wrote outside the data folder; `subdirectory=../..`
    (or an absolute one) built a folder outside the checkout into the layer."""
    with pytest.raises(TorchxNbError, match="names no wheel or source distribution"):
        fetch(
            parse_direct("http://127.0.0.1:9/files/..%2F..%2F..%2Fevil-1.0.tar.gz"),
            "req.txt",
            IndexSettings(),
        )
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "pkg").mkdir()
    (repo / "pkg" / "x.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    for sub in ("../..", "/etc", "pkg/../../.."):
        ref = parse_direct(f"git+file://{repo}@main#egg=x&subdirectory={sub}")
        dest = tmp_path / f"dest{len(sub)}"
        dest.mkdir()
        with pytest.raises(TorchxNbError, match="is outside the checkout"):
            _checkout(ref, "req.txt", dest)
    ok = parse_direct(f"git+file://{repo}@main#egg=x&subdirectory=pkg")
    (tmp_path / "ok").mkdir()
    got = _checkout(ok, "req.txt", tmp_path / "ok")
    assert (got.path / "x.py").read_text() == "x = 1\n"
