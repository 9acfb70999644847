"""Fetching URL and git requirements (environment/direct.py), against real git and real HTTP
servers on 127.0.0.0/8: credentials never reach another host, and hostile names and
subdirectories stay inside the folders they belong to."""

from __future__ import annotations

import contextlib
import http.server
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.infra.git_server import commit_to, make_repo, start_git_server
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


def test_a_local_git_requirement_is_checked_out_with_its_submodules(tmp_path: Path) -> None:
    """``git+file:///repo@rev`` (refused as "not a wheel" before) is checked out with its
    submodules, recursively, as pip does (before: empty folders, so the layer held other
    code than the kernel's); ``file:`` submodules are allowed because the repository is
    itself a local one. A submodule's new commit is a new identity."""
    root = tmp_path / "repos"
    deep = make_repo(root, "deep")
    commit_to(deep, {"y.py": "Y = 'deep-1'\n"})
    inner = make_repo(root, "inner")
    commit_to(inner, {"x.py": "X = 'inner-1'\n"})
    nested = {"deep": (root / "deep.git", (root / "deep.git").as_uri())}
    commit_to(inner, {}, nested)
    outer = make_repo(root, "outer")
    mod = {"pkg/inner": (root / "inner.git", (root / "inner.git").as_uri())}
    first = commit_to(outer, {"pyproject.toml": "", "pkg/__init__.py": ""}, mod)
    ref = parse_direct(f"git+{(root / 'outer.git').as_uri()}@main#egg=tnbsub")
    got = fetch(ref, "req.txt", IndexSettings())
    assert (got.path / "pkg" / "inner" / "x.py").read_text() == "X = 'inner-1'\n"
    assert (got.path / "pkg" / "inner" / "deep" / "y.py").read_text() == "Y = 'deep-1'\n"
    assert got.identity.startswith(f"git:{first}+submodules:"), got.identity

    commit_to(inner, {"x.py": "X = 'inner-2'\n"})
    second = commit_to(outer, {}, mod)  # only the submodule's commit moves
    again = fetch(ref, "req.txt", IndexSettings())
    assert (again.path / "pkg" / "inner" / "x.py").read_text() == "X = 'inner-2'\n"
    assert again.identity.startswith(f"git:{second}+submodules:")
    assert again.identity.split("+")[1] != got.identity.split("+")[1]
    # the first commit again: the same identity as before (a cached build is reused)
    at_first = fetch(
        parse_direct(f"git+{(root / 'outer.git').as_uri()}@{first}#egg=tnbsub"),
        "req.txt",
        IndexSettings(),
    )
    assert at_first.identity == got.identity
    plain = make_repo(root, "plain")
    only = commit_to(plain, {"z.py": ""})
    ref = parse_direct(f"git+{(root / 'plain.git').as_uri()}#egg=tnbplain")
    assert fetch(ref, "req.txt", IndexSettings()).identity == f"git:{only}"


def test_submodules_over_http_get_the_credentials_on_their_own_host_only(tmp_path: Path) -> None:
    """A private repository (real ``git http-backend``, basic auth) whose submodules are one
    on the same host (``../inner.git``: it needs the credentials, and gets them from git's
    first request) and one on another host (127.0.0.2: it must never see them); a ``file:``
    submodule of a repository that is not local is one line (git's own rule)."""
    root = tmp_path / "repos"
    inner = make_repo(root, "inner")
    commit_to(inner, {"x.py": "X = 'same-host'\n"})
    other_root = tmp_path / "other"
    other = make_repo(other_root, "other")
    commit_to(other, {"o.py": "O = 'other-host'\n"})
    private = start_git_server(root, "alice", "s3cret")
    elsewhere = start_git_server(other_root, "", "", host="127.0.0.2")
    try:
        outer = make_repo(root, "outer")
        commit_to(
            outer,
            {"top.py": ""},
            {
                "inner": (root / "inner.git", "../inner.git"),
                "other": (other_root / "other.git", elsewhere.url("other.git")),
            },
        )
        ref = parse_direct(f"git+{private.url('outer.git')}@main#egg=tnbouter")
        got = fetch(ref, "req.txt", IndexSettings())
        assert (got.path / "inner" / "x.py").read_text() == "X = 'same-host'\n"
        assert (got.path / "other" / "o.py").read_text() == "O = 'other-host'\n"
        assert private.refused == [] and any("inner.git" in p for p in private.asked)
        assert elsewhere.asked and elsewhere.authorization == []

        local = make_repo(root, "local")
        bad = commit_to(
            local, {"l.py": ""}, {"evil": (root / "inner.git", (root / "inner.git").as_uri())}
        )
        ref = parse_direct(f"git+{private.url('local.git')}@main#egg=tnblocal")
        with pytest.raises(TorchxNbError) as e:
            fetch(ref, "req.txt", IndexSettings())
        port = private.port
        assert str(e.value) == (
            f"--packages req.txt: tnblocal from git+http://****@127.0.0.1:{port}/local.git@main:"
            f" git cannot check out its submodule evil at {bad[:12]} (fatal: transport 'file'"
            " not allowed): fix the submodules' URLs or their access"
        )
    finally:
        private.stop()
        elsewhere.stop()


def test_a_git_server_that_answers_nothing_or_trickles_is_one_line_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A git server that accepts and never answers hung the submit for git's whole 600 s,
    then a TimeoutExpired traceback; one that trickles a byte now and then, the same. Now
    git's HTTP transfer gives up after READ_TIMEOUT_S of nothing, a git command that runs
    past GIT_TIMEOUT_S is one line, and its transport helper is stopped with it (the
    server's connection closes)."""
    from torchx_nb.environment import direct

    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setattr(direct, "READ_TIMEOUT_S", 2.0)
    monkeypatch.setattr(direct, "GIT_TIMEOUT_S", 6.0)
    closed = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            held.append(conn)
            if len(held) > 1:  # the second repository trickles its answer forever
                threading.Thread(target=trickle, args=(conn,), daemon=True).start()

    def trickle(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/x-git-upload-pack-advertisement"
                b"\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            while True:  # a few bytes a second: never too slow for git, never done
                conn.sendall(b"4\r\n0000\r\n")
                time.sleep(0.2)
        closed.set()

    threading.Thread(target=serve, daemon=True).start()
    try:
        for repo, said in (
            ("silent.git", "Operation too slow. Less than 1 bytes/sec transferred the last 2"),
            ("trickle.git", None),
        ):
            if said is None:  # a server thread starved on a busy machine is not 'too slow'
                monkeypatch.setattr(direct, "READ_TIMEOUT_S", 60.0)
            url = f"git+http://tok:s3cret@127.0.0.1:{port}/{repo}#egg=tnbg"
            started = time.monotonic()
            with pytest.raises(TorchxNbError) as e:
                fetch(parse_direct(url), "req.txt", IndexSettings())
            assert time.monotonic() - started < 45
            shown = f"git+http://****@127.0.0.1:{port}/{repo}"
            if said:
                assert str(e.value).startswith(
                    f"--packages req.txt: tnbg from {shown}: git cannot check it out (fatal:"
                )
                assert said in str(e.value)
            else:
                assert str(e.value) == (
                    f"--packages req.txt: tnbg from {shown}: git clone did not end in 6 s:"
                    " try again, or fix the server"
                )
                assert closed.wait(30), "git's transport helper still holds the connection"
            assert "s3cret" not in str(e.value)
    finally:
        listener.close()
        for conn in held:
            conn.close()


def test_the_kernel_s_git_repository_variables_do_not_reach_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel whose environment points git at another repository (GIT_DIR exported for a
    dotfiles repository, GIT_WORK_TREE, GIT_INDEX_FILE; a kernel started from a git hook):
    git cloned into that repository, took its commit for the requirement's (an empty
    checkout, the other repository's identity) and detached the other repository's HEAD.
    pip unsets them; so does the checkout now."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    root = tmp_path / "repos"
    repo = make_repo(root, "tnbenv")
    wanted = commit_to(repo, {"pyproject.toml": "", "tnbenv.py": "V = 'requirement'\n"})
    mine = tmp_path / "mine"
    git = ["git", "-C", str(mine), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(mine)], check=True)
    (mine / "mine.txt").write_text("mine\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "mine"], check=True)
    monkeypatch.setenv("GIT_DIR", str(mine / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(mine))
    monkeypatch.setenv("GIT_INDEX_FILE", str(mine / ".git" / "index"))
    for ref in (
        f"git+{(root / 'tnbenv.git').as_uri()}",
        f"git+{(root / 'tnbenv.git').as_uri()}@main",
    ):
        got = fetch(parse_direct(f"{ref}#egg=tnbenv"), "req.txt", IndexSettings())
        assert got.identity == f"git:{wanted}"
        assert (got.path / "tnbenv.py").read_text() == "V = 'requirement'\n"
    monkeypatch.delenv("GIT_DIR")
    monkeypatch.delenv("GIT_WORK_TREE")
    monkeypatch.delenv("GIT_INDEX_FILE")
    head = subprocess.run([*git, "symbolic-ref", "HEAD"], capture_output=True, text=True)
    assert head.stdout.strip() == "refs/heads/main", head.stderr  # not detached
    status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == ""


def test_a_submodule_commit_gone_from_its_remote_is_one_line_naming_the_submodule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit a repository's submodule is pinned at was force-pushed away on the
    submodule's remote (and pruned): one line naming the submodule and git's first fatal
    line. git names that submodule relative to the checkout ('Fetched in submodule path
    'sub', but …'), and the line named none ('its submodule at …')."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    root = tmp_path / "repos"
    inner = make_repo(root, "inner")
    pinned = commit_to(inner, {"x.py": "X = 1\n"})
    server = start_git_server(root, "alice", "s3cret")
    try:
        outer = make_repo(root, "outer")
        top = commit_to(
            outer, {"pyproject.toml": ""}, {"sub": (root / "inner.git", "../inner.git")}
        )
        git = ["git", "-C", str(inner), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "commit", "-q", "--amend", "-m", "rewritten"], check=True)
        subprocess.run([*git, "push", "-q", "-f", "origin", "HEAD:main"], check=True)
        subprocess.run(
            ["git", "-C", str(root / "inner.git"), "gc", "-q", "--prune=now"], check=True
        )
        with pytest.raises(TorchxNbError) as e:
            fetch(
                parse_direct(f"git+{server.url('outer.git')}@main#egg=tnbouter"),
                "req.txt",
                IndexSettings(),
            )
        assert str(e.value) == (
            f"--packages req.txt: tnbouter from git+http://****@127.0.0.1:{server.port}"
            f"/outer.git@main: git cannot check out its submodule sub at {top[:12]} (fatal:"
            f" remote error: upload-pack: not our ref {pinned}): fix the submodules' URLs or"
            " their access"
        )
    finally:
        server.stop()
