"""Git repositories served on 127.0.0.1 over smart HTTP (``git http-backend`` behind a small
WSGI server, basic auth required), for ``--packages FILE``'s VCS lines: a one-module project,
each commit a new ``V``. The server records each request's Authorization header."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

BUILD = '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'


@dataclass
class GitServer:
    root: Path
    port: int
    user: str
    password: str
    server: WSGIServer
    refused: list[str] = field(default_factory=list)  # paths asked without the credentials
    asked: list[str] = field(default_factory=list)  # every path asked for
    authorization: list[str] = field(default_factory=list)  # every Authorization header sent
    host: str = "127.0.0.1"

    def url(self, repo: str, with_credentials: bool = True) -> str:
        from urllib.parse import quote

        creds = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}@"
        with_credentials = with_credentials and bool(self.user)
        return f"http://{creds if with_credentials else ''}{self.host}:{self.port}/{repo}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def start_git_server(root: Path, user: str, password: str, host: str = "127.0.0.1") -> GitServer:
    """Every repository under ``root`` over smart HTTP on ``host``, for ``user`` and
    ``password`` only (401 otherwise; open to all when ``user`` is empty)."""
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    box: list[GitServer] = []

    def app(environ: dict[str, Any], start: Any) -> list[bytes]:
        box[0].asked.append(environ.get("PATH_INFO", ""))
        if environ.get("HTTP_AUTHORIZATION"):
            box[0].authorization.append(environ["HTTP_AUTHORIZATION"])
        if user and environ.get("HTTP_AUTHORIZATION") != expected:
            box[0].refused.append(environ.get("PATH_INFO", ""))
            start("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')])
            return [b"no"]
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        cgi = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": user,
            "REMOTE_ADDR": "127.0.0.1",
            "PATH_INFO": environ.get("PATH_INFO", ""),
            "QUERY_STRING": environ.get("QUERY_STRING", ""),
            "REQUEST_METHOD": environ["REQUEST_METHOD"],
            "CONTENT_TYPE": environ.get("CONTENT_TYPE", ""),
            "CONTENT_LENGTH": str(len(body)),
        }
        if environ.get("HTTP_GIT_PROTOCOL"):
            cgi["GIT_PROTOCOL"] = environ["HTTP_GIT_PROTOCOL"]
        out = subprocess.run(
            ["git", "http-backend"], input=body, env=cgi, capture_output=True, check=False
        ).stdout
        head, _, rest = out.partition(b"\r\n\r\n")
        headers, status = [], "200 OK"
        for line in head.decode().split("\r\n"):
            key, _, value = line.partition(": ")
            if key.lower() == "status":
                status = value
            elif key:
                headers.append((key, value))
        start(status, headers)
        return [rest]

    server = make_server(host, 0, app, handler_class=_Quiet)
    git = GitServer(root, server.server_port, user, password, server, host=host)
    box.append(git)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return git


def _git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@127.0.0.1",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@127.0.0.1",
        "HOME": str(cwd),
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


def make_project_repo(root: Path, name: str, values: list[str], requires: str = "") -> list[str]:
    """A bare repository ``root/name.git`` of a one-module project ``name`` (dependencies
    ``requires``): one commit per value of ``V``, the first tagged v1; their commit ids."""
    work = root / f"{name}-work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    (work / "pyproject.toml").write_text(
        BUILD + f'[project]\nname = "{name}"\nversion = "1.0"\ndependencies = [{requires}]\n'
        f'[tool.setuptools]\npy-modules = ["{name}"]\n'
    )
    commits = []
    for i, value in enumerate(values):
        (work / f"{name}.py").write_text(f"V = {value!r}\n")
        _git(work, "add", "-A")
        _git(work, "commit", "-q", "-m", value)
        if i == 0:
            _git(work, "tag", "v1")
        commits.append(_git(work, "rev-parse", "HEAD"))
    _git(root, "clone", "-q", "--bare", str(work), f"{name}.git")
    return commits


def make_repo(root: Path, name: str) -> Path:
    """An empty repository ``root/name.git`` (bare, as served) and its work folder, returned:
    commit to it with :func:`commit_to`."""
    work = root / f"{name}-work"
    work.mkdir(parents=True)
    _git(work, "init", "-q", "-b", "main")
    _git(root, "init", "-q", "--bare", "-b", "main", f"{name}.git")
    _git(work, "remote", "add", "origin", str(root / f"{name}.git"))
    return work


def commit_to(
    work: Path, files: dict[str, str], submodules: dict[str, tuple[Path, str]] | None = None
) -> str:
    """Write ``files`` into ``work``, and for each submodule path its repository (a bare
    one made by :func:`make_repo`) at that repository's newest commit, with the URL
    ``.gitmodules`` gives (relative, another host's, ``file:``); commit and push. The commit."""
    for rel, text in files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    for path, (bare, url) in (submodules or {}).items():
        if not (work / path / ".git").exists():
            _git(
                work, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(bare), path
            )
        _git(work / path, "-c", "protocol.file.allow=always", "fetch", "-q", str(bare), "main")
        _git(work / path, "checkout", "-q", "FETCH_HEAD")
        _git(work, "config", "-f", ".gitmodules", f"submodule.{path}.url", url)
    _git(work, "add", "-A")
    _git(work, "commit", "-q", "-m", "next")
    _git(work, "push", "-q", "origin", "main")
    return _git(work, "rev-parse", "HEAD")
