"""A URL requirement's download against a real HTTP server on 127.0.0.1 that misbehaves: a
body cut short (with and without a Content-Length), a server error on every try, a server
that stops sending, a wheel whose own metadata names another distribution, and two kernels
fetching the same URL at once. Each is one line naming what happened, or works."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.server
import io
import json
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.pypi_index import make_wheel
from torchx_nb.environment import direct
from torchx_nb.environment.direct import fetch, parse_direct
from torchx_nb.environment.index import IndexSettings
from torchx_nb.specs import TorchxNbError

WHEEL = "tnbt-1.0-py3-none-any.whl"


def _sdist(name: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for rel, text in {
            f"{name}-1.0/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
            f"{name}-1.0/{name}.py": "V = 1\n" + "# padding\n" * 4000,
        }.items():
            info = tarfile.TarInfo(rel)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))
    return gzip.compress(buf.getvalue(), mtime=0)  # the same bytes each time


@contextlib.contextmanager
def _server(tmp_path: Path) -> Iterator[tuple[str, dict[str, int]]]:
    wheel = make_wheel(tmp_path / "w", "tnbt", "1.0", body="x" * 20000).read_bytes()
    other = make_wheel(tmp_path / "o", "tnby", "1.0").read_bytes()
    sdist = _sdist("tnbt")
    v2 = make_wheel(tmp_path / "v", "tnbt", "2.0").read_bytes()
    dotted = make_wheel(tmp_path / "d", "Foo.Bar", "1.0.0").read_bytes()
    asked: dict[str, int] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            kind = self.path.split("/")[1]
            asked[kind] = asked.get(kind, 0) + 1
            body = {
                "misnamed": other,
                "cutsdist": sdist,
                "gzipped": sdist,
                "otherversion": v2,
                "normalized": dotted,
            }.get(kind, wheel)
            if kind == "fail":
                self.send_response(500)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if kind == "late":
                time.sleep(3)
            self.send_response(200)
            if kind == "gzipped":  # a server that labels the .tar.gz as gzip-encoded
                self.send_header("Content-Encoding", "gzip")
            if kind == "login":  # a store that answers a sign-in page with 200
                body = b"<html><body><form>Sign in</form></body></html>"
                self.send_header("Content-Type", "text/html; charset=utf-8")
            if kind not in ("cutnolen", "cutsdist"):
                self.send_header("Content-Length", str(len(body)))
            else:
                self.send_header("Connection", "close")
            self.end_headers()
            if kind.startswith("cut"):
                self.wfile.write(body[: len(body) // 2])
                self.close_connection = True
                return
            if kind == "stall":
                self.wfile.write(body[:100])
                self.wfile.flush()
                time.sleep(3)
            if kind == "slow":  # two kernels' downloads overlap
                for i in range(0, len(body), 2000):
                    self.wfile.write(body[i : i + 2000])
                    self.wfile.flush()
                    time.sleep(0.1)
                return
            with contextlib.suppress(OSError):
                self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def _refusal(url: str) -> str:
    with pytest.raises(TorchxNbError) as e:
        fetch(parse_direct(url), "req.txt", IndexSettings())
    return str(e.value)


def test_a_download_that_goes_wrong_is_one_line_naming_what_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct, "READ_TIMEOUT_S", 1.0)
    with _server(tmp_path) as (base, asked):
        assert fetch(parse_direct(f"{base}/whole/{WHEEL}"), "req.txt", IndexSettings()).is_wheel
        url = f"{base}/cut/{WHEEL}"
        assert _refusal(url).startswith(f"--packages req.txt: {url} ended early (")
        assert _refusal(url).endswith(" bytes came): try again, or fix the server")
        url = f"{base}/cutnolen/{WHEEL}"  # no length to tell: the wheel itself says it
        assert _refusal(url).startswith(
            f"--packages req.txt: {url} is not a whole wheel (BadZipFile: "
        )
        url = f"{base}/cutsdist/tnbt-1.0.tar.gz"
        assert _refusal(url).startswith(
            f"--packages req.txt: {url} is not a whole source distribution ("
        )
        url = f"{base}/fail/{WHEEL}"
        assert _refusal(url) == (
            f"--packages req.txt: {url} answered HTTP 500, a server error, 4 times: try again"
            " later, or fix the server"
        )
        assert asked["fail"] == 4
        url = f"{base}/stall/{WHEEL}"
        assert _refusal(url) == (
            f"--packages req.txt: {url} stopped sending for 1 s: try again, or fix the server"
        )
        url = f"{base}/late/{WHEEL}"
        assert _refusal(url) == (
            f"--packages req.txt: {url} sent no answer for 1 s: try again, or fix the server"
        )
        url = f"{base}/misnamed/tnbx-1.0-py3-none-any.whl"
        assert _refusal(url) == (
            f"--packages req.txt: {url} is a wheel of tnby (its metadata says so), not of"
            " tnbx as its file name says: fix the file or the URL"
        )
    assert not [p for p in (tmp_path / "torchx-nb-data").rglob("*") if p.name.startswith("fetch-")]


def test_two_kernels_fetching_one_url_at_once_both_get_it(tmp_path: Path) -> None:
    script = (
        "import json, sys\n"
        "from torchx_nb.environment.direct import fetch, parse_direct\n"
        "from torchx_nb.environment.index import IndexSettings\n"
        "got = fetch(parse_direct(sys.argv[1]), 'req.txt', IndexSettings())\n"
        "print(json.dumps([str(got.path), got.identity, got.path.stat().st_size]))\n"
    )
    with _server(tmp_path) as (base, asked):
        url = f"{base}/slow/{WHEEL}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, url],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    (one, two) = [json.loads(out) for out, _ in outs]
    assert one == two and asked["slow"] == 2
    assert Path(one[0]).is_file()


def test_a_wheel_s_metadata_is_read_by_its_headers_not_whole(tmp_path: Path) -> None:
    """A hostile wheel whose METADATA inflates to 64 MB (a few KB compressed): its name is
    read from the first MB, never the whole of it into memory."""
    import tracemalloc
    import zipfile

    from torchx_nb.environment.archives import metadata_name

    path = tmp_path / WHEEL
    with (
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf,
        zf.open("tnbt-1.0.dist-info/METADATA", "w") as f,
    ):
        f.write(b"Metadata-Version: 2.1\nName: tnbt\nVersion: 1.0\n\n")
        for _ in range(64):
            f.write(b"\0" * (1 << 20))
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        assert metadata_name(path) == "tnbt"
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, peak


def test_a_download_is_the_file_as_served_and_its_metadata_agrees_as_pip_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that labels a .tar.gz ``Content-Encoding: gzip`` (a common misconfiguration):
    the file is its bytes as served, as pip keeps them (requests unpacked it: another
    sha256, a '#sha256=' of the real file refused, a plain tar named .tar.gz). A wheel whose
    METADATA gives another version than its file name is refused, as pip refuses it (it was
    taken: the plan said 1.0, the job got 2.0); one whose name and version differ only by
    normalization (Foo.Bar 1.0.0 in foo_bar-1.0-….whl) is the same distribution. A web page
    answered instead of the file (a sign-in page) is said as such."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    want = hashlib.sha256(_sdist("tnbt")).hexdigest()
    with _server(tmp_path) as (base, _):
        got = fetch(
            parse_direct(f"{base}/gzipped/tnbt-1.0.tar.gz#sha256={want}"),
            "req.txt",
            IndexSettings(),
        )
        assert got.identity == f"sha256:{want}"
        assert got.path.read_bytes() == _sdist("tnbt")
        url = f"{base}/otherversion/tnbt-1.0-py3-none-any.whl"
        assert _refusal(url) == (
            f"--packages req.txt: {url} is a wheel of tnbt 2.0 (its metadata says so), not"
            " 1.0 as its file name says: fix the file or the URL"
        )
        url = f"{base}/normalized/foo_bar-1.0-py3-none-any.whl"
        assert fetch(parse_direct(url), "req.txt", IndexSettings()).is_wheel
        # a sign-in page answered with 200 was 'not a whole wheel (BadZipFile …): fetch it
        # again', as if the download had been cut
        url = f"{base}/login/tnbt-1.0-py3-none-any.whl"
        assert _refusal(url) == (
            f"--packages req.txt: {url} answered a web page (text/html), not a wheel: a login"
            " page? fix the URL or its access"
        )
