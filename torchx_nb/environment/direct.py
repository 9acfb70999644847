"""Direct references in a ``--packages FILE``: a URL (``pkg @ https://…/pkg-1.0-…whl``, a bare
wheel or sdist URL) or a git checkout (``git+https://…@rev#egg=pkg``, ``git+file:///repo@rev``; a uv.lock's
``git`` and ``url`` sources) with its submodules, fetched at submit as pip fetches them — never in a dry run — and then built
or installed like a local folder or wheel file. Credentials in the URL stay in this process:
the download sends them as a header, git gets them through its environment
(``GIT_CONFIG_*``: an ``http.extraHeader``), neither argv nor any file holds them (the
checkout's remote is the URL without them), and every message masks them. Identity: the
commit git checked out (and its submodules' commits), or the sha256 of the file downloaded."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from torchx_nb import http_retry
from torchx_nb.environment.index import IndexSettings, file_url_path, mask_url
from torchx_nb.specs.api import TorchxNbError

_VCS = re.compile(r"^(?P<vcs>git|hg|svn|bzr)\+(?P<url>.+)$")
_EGG = re.compile(r"[#&]egg=([A-Za-z0-9][A-Za-z0-9._-]*)")
_SUB = re.compile(r"[#&]subdirectory=([^&]+)")
_FETCHED_DAYS = 1  # fetched checkouts and files older than this are swept
READ_TIMEOUT_S = 60.0  # a download that sends nothing for this long is given up
# what `git rev-parse --local-env-vars` lists: the variables that point git at a repository
_REPOSITORY_ENV = frozenset(
    [
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_CONFIG",
        "GIT_CONFIG_PARAMETERS",
        "GIT_CONFIG_COUNT",
        "GIT_OBJECT_DIRECTORY",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_GRAFT_FILE",
        "GIT_INDEX_FILE",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_REPLACE_REF_BASE",
        "GIT_PREFIX",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_SHALLOW_FILE",
        "GIT_COMMON_DIR",
    ]
)
GIT_TIMEOUT_S = 600.0  # one git command (a clone, the submodules) that runs longer is stopped


@dataclass(frozen=True)
class DirectRef:
    """A distribution named by where it is, not by an index: ``url`` as written (with its
    credentials; kept in memory only), ``vcs`` (``git``) or None for a file URL, the
    revision asked for and the subdirectory holding the project."""

    name: str | None
    url: str
    vcs: str | None = None
    rev: str | None = None
    subdirectory: str | None = None
    sha256: str | None = None  # the hash the URL's fragment, or the lock, gives

    @property
    def shown(self) -> str:
        """The reference as the user may see it (credentials masked)."""
        if self.vcs:
            return mask_url(f"{self.vcs}+{self.url}" + (f"@{self.rev}" if self.rev else ""))
        return mask_url(self.url)

    def guess_name(self) -> str:
        """The name before anything is fetched: the one written, else the file's or the
        repository's (a dry run shows it)."""
        if self.name:
            return self.name
        last = urllib.parse.urlsplit(self.url).path.rstrip("/").rsplit("/", 1)[-1]
        if self.vcs is None:
            parsed = _parse_filename(last)
            if parsed is not None:
                return parsed[0]
        return re.sub(r"\.git$", "", last) or "unnamed"

    def guess_version(self) -> str | None:
        """The version a wheel's or sdist's file name says (None for a checkout)."""
        if self.vcs is not None:
            return None
        last = urllib.parse.urlsplit(self.url).path.rstrip("/").rsplit("/", 1)[-1]
        parsed = _parse_filename(last)
        return parsed[1] if parsed else None


def _parse_filename(filename: str) -> tuple[str, str] | None:
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
        else:
            name, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return str(name), str(version)


def parse_direct(url: str, name: str | None = None) -> DirectRef:
    """A requirement's URL (``name @ URL`` or a bare URL line) as a reference."""
    fragment = url.split("#", 1)[1] if "#" in url else ""
    egg = _EGG.search("#" + fragment)
    sub = _SUB.search("#" + fragment)
    name = name or (egg[1] if egg else None)
    subdirectory = urllib.parse.unquote(sub[1]) if sub else None
    base = url.split("#", 1)[0]
    m = _VCS.match(base)
    if m is None:
        sha = re.search(r"(?:^|&)sha256=([0-9a-fA-F]{64})", fragment)
        return DirectRef(name, base, None, None, subdirectory, sha[1].lower() if sha else None)
    vcs, rest = m["vcs"], m["url"]
    parts = urllib.parse.urlsplit(rest)
    rev = None
    if "@" in parts.path:  # the revision follows the path's last '@' (userinfo is before it)
        path, rev = parts.path.rsplit("@", 1)
        rest = urllib.parse.urlunsplit(parts._replace(path=path))
    return DirectRef(name, rest, vcs, rev or None, subdirectory)


def lock_source(source: dict[str, object], name: str) -> DirectRef | None:
    """A uv.lock's ``git`` or ``url`` source as a reference (None for any other): ``git =
    "https://host/r.git?rev=v1&subdirectory=x#<commit>"`` is checked out at its commit."""
    if "git" in source:
        raw = str(source["git"])
        url, _, commit = raw.partition("#")
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query)
        sub = query["subdirectory"][0] if "subdirectory" in query else None
        rev = commit or next((query[k][0] for k in ("rev", "tag", "branch") if k in query), None)
        plain = urllib.parse.urlunsplit(parts._replace(query=""))
        return DirectRef(name, plain, "git", rev, sub)
    if "url" in source:
        return DirectRef(name, str(source["url"]), None, None, source.get("subdirectory"))  # type: ignore[arg-type]
    return None


@dataclass(frozen=True)
class Fetched:
    """What a reference gave: a folder to build a wheel from, or a wheel or sdist file; and
    what it is by its contents (``git:<commit>`` or ``sha256:<digest>``)."""

    path: Path
    identity: str
    is_wheel: bool = False


def _split_credentials(url: str) -> tuple[str, str | None]:
    """``https://u:p@host/x`` -> (``https://host/x``, ``u:p`` percent-decoded) — userinfo ends
    at the last ``@`` before the host, as pip reads it."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    creds = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return urllib.parse.urlunsplit(parts._replace(netloc=host)), creds


def fetched_dir() -> Path:
    """Where fetched checkouts and files are kept (owner-only; no URL or credential in any
    name), swept when a day old."""
    from torchx_nb.paths import data_dir, private_dir

    root = private_dir(data_dir() / "env-direct")
    cutoff = time.time() - _FETCHED_DAYS * 86400
    for old in root.iterdir():
        try:
            if old.stat().st_mtime < cutoff:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        except OSError:
            continue
    return root


def fetch(ref: DirectRef, origin: str, index: IndexSettings) -> Fetched:
    """Fetch ``ref`` (at submit), one line naming it (masked) when that fails."""
    if ref.vcs not in (None, "git"):
        raise TorchxNbError(
            f"--packages {origin}: {ref.guess_name()} from {ref.shown}: only git checkouts"
            f" are fetched, not {ref.vcs}: publish it to your index, or use a git URL"
        )
    local = file_url_path(ref.url) if ref.vcs is None else None
    if local is not None:  # a wheel or sdist file on this machine: taken as it is
        from torchx_nb.environment.identity import file_digest

        found = Path(local)
        if not found.is_file() or _parse_filename(found.name) is None:
            raise TorchxNbError(
                f"--packages {origin}: {ref.url} is not a wheel or source distribution file"
            )
        digest = file_digest(found)
        _check_hash(ref, digest, origin)
        _check_archive(ref, found, origin)
        return Fetched(found, f"sha256:{digest}", found.suffix == ".whl")
    root = fetched_dir()
    dest = Path(tempfile.mkdtemp(prefix="fetch-", dir=root))
    try:
        got = (
            _download(ref, origin, index, dest) if ref.vcs is None else _checkout(ref, origin, dest)
        )
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    # one folder per identity (a re-submit reuses it): its name a digest, never the URL
    kept = root / hashlib.sha256(got.identity.encode()).hexdigest()[:32]
    try:
        dest.rename(kept)
    except OSError:  # fetched before: keep that one
        shutil.rmtree(dest, ignore_errors=True)
    os.utime(kept)
    return Fetched(kept / got.path.relative_to(dest), got.identity, got.is_wheel)


def _download(ref: DirectRef, origin: str, index: IndexSettings, dest: Path) -> Fetched:
    import requests

    from torchx_nb.environment.index_pages import _session

    plain, creds = _split_credentials(ref.url)
    filename = urllib.parse.unquote(urllib.parse.urlsplit(plain).path.rsplit("/", 1)[-1])
    if "/" in filename or "\\" in filename or _parse_filename(filename) is None:
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown} names no wheel or source distribution"
            " (a file name like pkg-1.0-py3-none-any.whl or pkg-1.0.tar.gz)"
        )
    host = urllib.parse.urlsplit(plain).hostname or ""
    trusted = any(t.split(":")[0] == host for t in index.trusted_hosts)
    auth = tuple(creds.split(":", 1)) if creds else None
    target = dest / filename
    digest = hashlib.sha256()
    size, length, answered, served_as = 0, None, False, ""
    try:
        with _session().get(
            plain,
            auth=auth,
            # the file's own bytes, as pip takes them: a server that labels a .tar.gz
            # Content-Encoding: gzip would have it unpacked (another file, another sha256)
            headers={"Accept-Encoding": "identity"},
            stream=True,
            timeout=READ_TIMEOUT_S,
            verify=False if trusted else (index.cert or True),
            cert=index.client_cert,
        ) as resp:
            answered = True
            served_as = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            code = resp.status_code
            if code in (401, 403):
                said = f"refused the credentials (HTTP {code}): fix the URL or its access"
            elif code >= 500:
                said = (
                    f"answered HTTP {code}, a server error, {http_retry.TRIES} times: try"
                    " again later, or fix the server"
                )
            elif code >= 400:
                said = f"answered HTTP {code}: fix the URL or its access"
            else:
                said = ""
                given = resp.headers.get("Content-Length", "")
                length = int(given) if given.isdigit() else None
                with open(target, "wb") as f:
                    for chunk in _raw_chunks(resp):
                        digest.update(chunk)
                        f.write(chunk)
                        size += len(chunk)
    except requests.exceptions.ChunkedEncodingError:  # the connection closed before its end
        said = _ended(size, length)
    except requests.RequestException as e:
        wait = int(READ_TIMEOUT_S)
        if _timed_out(e) and answered:
            said = f"stopped sending for {wait} s: try again, or fix the server"
        elif _timed_out(e):
            said = f"sent no answer for {wait} s: try again, or fix the server"
        else:
            said = f"is unreachable ({type(e).__name__}): fix the URL or its access"
    if not said and length is not None and size != length:
        said = _ended(size, length)
    if said:
        raise TorchxNbError(f"--packages {origin}: {ref.shown} {said}")
    got = digest.hexdigest()
    _check_hash(ref, got, origin)
    _check_archive(ref, target, origin, served_as)
    return Fetched(target, f"sha256:{got}", filename.endswith(".whl"))


def _raw_chunks(resp: object) -> Iterator[bytes]:
    """The body as it came, never decoded (``requests``' ``iter_content`` undoes any
    Content-Encoding), urllib3's errors raised as ``requests`` raises them."""
    import requests
    from urllib3.exceptions import ProtocolError, ReadTimeoutError

    try:
        yield from resp.raw.stream(1 << 20, decode_content=False)  # type: ignore[attr-defined]
    except ProtocolError as e:
        raise requests.exceptions.ChunkedEncodingError(e) from e
    except ReadTimeoutError as e:
        raise requests.exceptions.ConnectionError(e) from e


def _ended(size: int, length: int | None) -> str:
    of = f" of {length}" if length is not None else ""
    return f"ended early ({size}{of} bytes came): try again, or fix the server"


def _timed_out(e: Exception) -> bool:
    """Whether ``e`` is a read that waited ``READ_TIMEOUT_S`` for nothing (requests names it
    ReadTimeout before the answer, and a ConnectionError around urllib3's during the body
    or once the retries are spent)."""
    import requests
    from urllib3.exceptions import MaxRetryError, ReadTimeoutError

    inner = e.args[0] if e.args else None
    if isinstance(inner, MaxRetryError):
        inner = inner.reason
    return isinstance(e, requests.exceptions.ReadTimeout) or isinstance(inner, ReadTimeoutError)


def _check_archive(ref: DirectRef, path: Path, origin: str, served_as: str = "") -> None:
    """Refuse, in one line, a file that is not a whole wheel or sdist (a download cut short
    with no length to tell), or whose own metadata names another distribution, or another
    version, than its file name does (pip refuses both: 'inconsistent name' / 'inconsistent
    version'); names and versions are compared normalized (``Foo_Bar`` is ``foo-bar``,
    ``1.0`` is ``1.0.0``)."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    from torchx_nb.environment.archives import name_and_version

    kind = "wheel" if path.suffix == ".whl" else "source distribution"
    try:
        name, version = name_and_version(path)
    except ValueError as e:
        if served_as in ("text/html", "application/xhtml+xml"):  # a login or error page
            raise TorchxNbError(
                f"--packages {origin}: {ref.shown} answered a web page ({served_as}), not a"
                f" {kind}: a login page? fix the URL or its access"
            ) from None
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown} is not a whole {kind} ({e}): fetch it again,"
            " or fix the file"
        ) from None
    parsed = _parse_filename(path.name)
    if parsed is None:
        return
    if canonicalize_name(name) != canonicalize_name(parsed[0]):
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown} is a {kind} of {name} (its metadata says so),"
            f" not of {parsed[0]} as its file name says: fix the file or the URL"
        )
    if version is None:
        return
    try:
        same = Version(version) == Version(parsed[1])
    except InvalidVersion:
        same = version == parsed[1]
    if not same:
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown} is a {kind} of {name} {version} (its metadata"
            f" says so), not {parsed[1]} as its file name says: fix the file or the URL"
        )


def _check_hash(ref: DirectRef, got: str, origin: str) -> None:
    """Refuse, in one line, a file whose sha256 is not the one its line or lock names."""
    want = (ref.sha256 or "").removeprefix("sha256:").lower()
    if want and got != want:
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown} is a file with sha256 {got[:16]}…, not the"
            f" {want[:16]}… it names: fix the hash or the URL"
        )


def git_env(url: str) -> tuple[str, dict[str, str]]:
    """The URL git is given (no credentials) and the environment that hands it them: an
    ``Authorization`` header through ``GIT_CONFIG_*`` (never argv, never .git/config); no
    prompt for what is missing. A ``file:`` repository may have ``file:`` submodules (git
    refuses them by default: ``protocol.file.allow=user``); any other may not."""
    plain, creds = _split_credentials(url)
    # none of the kernel's repository variables (a GIT_DIR exported for dotfiles, a kernel
    # started from a git hook): with them git clones, checks out and reads the commit of
    # that other repository, whose HEAD it detaches; pip unsets them too
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_CONFIG_") and k not in _REPOSITORY_ENV
    }
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", GCM_INTERACTIVE="never")
    # a server that answers nothing (or stops sending) ends git's HTTP transfer after
    # READ_TIMEOUT_S, as a download's does; git has no such limit of its own
    env.setdefault("GIT_HTTP_LOW_SPEED_LIMIT", "1")
    env.setdefault("GIT_HTTP_LOW_SPEED_TIME", str(max(1, int(READ_TIMEOUT_S))))
    config: list[tuple[str, str]] = []
    if creds and plain.startswith(("http://", "https://")):
        token = base64.b64encode(creds.encode()).decode()
        parts = urllib.parse.urlsplit(plain)
        # the header scoped to this scheme, host and port (git's http.<url>.* config: a
        # submodule elsewhere never gets it), and no redirect followed: git keeps the config
        # of the URL it was given for the one it is sent to, header included
        config += [
            (f"http.{parts.scheme}://{parts.netloc}/.extraHeader", f"Authorization: Basic {token}"),
            ("http.followRedirects", "false"),
        ]
    if plain.startswith("file:"):
        config.append(("protocol.file.allow", "always"))
    for i, (key, value) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    if config:
        env["GIT_CONFIG_COUNT"] = str(len(config))
    return plain, env


def _checkout(ref: DirectRef, origin: str, dest: Path) -> Fetched:
    plain, env = git_env(ref.url)
    folder = dest / "checkout"

    def git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return _run_git(ref, origin, list(args), cwd, env)

    proc = git("clone", "--quiet", "--no-checkout", "--", plain, str(folder))
    if proc.returncode == 0:
        wanted = ref.rev or "HEAD"
        for candidate in (wanted, f"origin/{wanted}"):  # a commit or tag, else a branch
            proc = git("rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", cwd=folder)
            if proc.returncode == 0:
                break
        else:
            proc.stderr = f"no revision {wanted!r} in it"
        if proc.returncode == 0:
            proc = git("checkout", "--quiet", "--detach", proc.stdout.strip(), cwd=folder)
    if proc.returncode != 0:
        raise TorchxNbError(
            f"--packages {origin}: {ref.guess_name()} from {ref.shown}: git cannot check it"
            f" out ({_last_line(proc)}): fix the URL, the revision or its access"
        )
    commit = git("rev-parse", "HEAD", cwd=folder).stdout.strip()
    # its submodules, as pip checks them out: what the commit names, recursively
    proc = git("submodule", "update", "--init", "--recursive", "--quiet", cwd=folder)
    if proc.returncode != 0:
        # which one: git names its path (absolute, under our folder: said from the checkout)
        # (or relative to the checkout: 'Fetched in submodule path 'sub', but …')
        named = re.search(r"submodule path '([^']+)'", proc.stderr)
        which = named[1] if named else ""
        which = os.path.relpath(which, folder) if os.path.isabs(which) else which
        which = f" {which}" if which and not which.startswith("..") else ""
        raise TorchxNbError(
            f"--packages {origin}: {ref.guess_name()} from {ref.shown}: git cannot check out"
            f" its submodule{which} at {commit[:12]} ({_last_line(proc, 'fatal:')}): fix the"
            " submodules' URLs or their access"
        )
    status = git("submodule", "status", "--recursive", cwd=folder).stdout.split("\n")
    submodules = sorted(" ".join(line[1:].split()[:2]) for line in status if line.strip())
    project = folder / ref.subdirectory if ref.subdirectory else folder
    if not project.resolve().is_relative_to(folder.resolve()):
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown}: subdirectory={ref.subdirectory!r} is outside"
            " the checkout: name a folder inside the repository"
        )
    if not project.is_dir():
        raise TorchxNbError(
            f"--packages {origin}: {ref.shown} has no folder {ref.subdirectory!r} at {commit[:12]}"
        )
    sub = f"/{ref.subdirectory}" if ref.subdirectory else ""
    # the submodules' commits are in the identity (a checkout without them had the same
    # commit: its cached build must not stand for this one)
    mods = hashlib.sha256("\n".join(submodules).encode()).hexdigest()[:32] if submodules else ""
    return Fetched(project, f"git:{commit}{sub}" + (f"+submodules:{mods}" if mods else ""))


def _run_git(
    ref: DirectRef, origin: str, args: list[str], cwd: Path | None, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``git *args``, in its own process group: stopped with its helpers (git-remote-http,
    ssh) after ``GIT_TIMEOUT_S`` (one line) or when this process is interrupted — a killed
    ``git`` alone leaves its transport helper waiting on the server."""
    import signal

    proc = subprocess.Popen(
        ["git", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=GIT_TIMEOUT_S)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()  # not its pipes: a helper that left the group may still hold them
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if isinstance(e, subprocess.TimeoutExpired):
            raise TorchxNbError(
                f"--packages {origin}: {ref.guess_name()} from {ref.shown}: git {args[0]} did"
                f" not end in {int(GIT_TIMEOUT_S)} s: try again, or fix the server"
            ) from None
        raise
    return subprocess.CompletedProcess(["git", *args], proc.returncode, out, err)


def _last_line(proc: subprocess.CompletedProcess[str], first: str = "") -> str:
    """git's last line of error (its first starting with ``first``, when one does: git
    retries a submodule and ends with a line saying only that), credentials masked."""
    lines = proc.stderr.strip().splitlines() or ["failed"]
    said = next((line for line in lines if first and line.startswith(first)), lines[-1])
    return mask_url(said)
