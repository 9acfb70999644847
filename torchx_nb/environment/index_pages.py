"""What the indexes pip would consult say about a distribution: each index's project page
(PEP 503 HTML or PEP 691 JSON, over http(s) with pip's credentials and TLS settings, or a
``file://`` index), and each find-links folder or page. Read for two things: the sha256 of
the wheels an index serves (a distribution's identity, for the layer's cache key), and, when
an install fails, what the index said (no such version; no wheel for the image's platform
and Python, with the tags it has; credentials refused; unreachable) instead of a guess.
Reading pages downloads no distribution, so a dry run may do it."""

from __future__ import annotations

import os
import threading
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from torchx_nb.environment.index import IndexSettings, file_url_path, mask_url
from torchx_nb.environment.tags import image_tags
from torchx_nb.workspace.image_contents import ImageContents

TIMEOUT = 30
_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


@dataclass(frozen=True)
class ServedFile:
    """One file a source lists for a distribution."""

    filename: str
    sha256: str | None
    version: str | None  # None: not a wheel or sdist name read here
    tags: frozenset[str] = frozenset()  # a wheel's tags (empty for an sdist)
    path: str | None = None  # the file, when it is in a local folder


@dataclass(frozen=True)
class Listing:
    """What one index or find-links source says about a name: ``listed`` (with its files),
    ``absent``, ``refused`` (401/403: the credentials) or ``unreachable``."""

    source: str  # masked
    state: str
    files: tuple[ServedFile, ...] = ()
    detail: str = ""


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _file(
    name: str, filename: str, sha256: str | None, path: str | None = None
) -> ServedFile | None:
    """``filename`` as a file of distribution ``name`` (None when it is another's)."""
    from packaging.utils import (
        InvalidSdistFilename,
        InvalidWheelFilename,
        canonicalize_name,
        parse_sdist_filename,
        parse_wheel_filename,
    )

    want = canonicalize_name(name)
    try:
        if filename.endswith(".whl"):
            dist, version, _, tags = parse_wheel_filename(filename)
            found = frozenset(str(t) for t in tags)
        else:
            dist, version = parse_sdist_filename(filename)
            found = frozenset()
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    if canonicalize_name(dist) != want:
        return None
    return ServedFile(filename, sha256, str(version), found, path)


def _from_hrefs(name: str, hrefs: list[str]) -> tuple[ServedFile, ...]:
    out = []
    for href in hrefs:
        parts = urllib.parse.urlsplit(href)
        filename = urllib.parse.unquote(parts.path.rsplit("/", 1)[-1])
        frag = urllib.parse.parse_qs(parts.fragment)
        sha = frag["sha256"][0] if frag.get("sha256") else None
        f = _file(name, filename, sha)
        if f is not None:
            out.append(f)
    return tuple(out)


def _parse(name: str, body: bytes, content_type: str) -> tuple[ServedFile, ...]:
    if "json" in content_type:
        import json

        doc = json.loads(body)
        out = []
        for entry in doc.get("files", []):
            sha = (entry.get("hashes") or {}).get("sha256")
            f = _file(name, str(entry.get("filename", "")), sha)
            if f is not None:
                out.append(f)
        return tuple(out)
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    return _from_hrefs(name, parser.hrefs)


def _http(url: str, name: str, settings: IndexSettings, project_page: bool, shown: str) -> Listing:
    import warnings

    import requests
    from urllib3.exceptions import InsecureRequestWarning

    host = urllib.parse.urlsplit(url).hostname or ""
    trusted = any(t.split(":")[0] == host for t in settings.trusted_hosts)
    verify: bool | str = False if trusted else (settings.cert or True)
    try:
        with warnings.catch_warnings():
            if trusted:  # pip's trusted-host: the user asked for no TLS check, no warning
                warnings.simplefilter("ignore", InsecureRequestWarning)
            resp = _session().get(
                url,
                headers={"Accept": _ACCEPT},
                timeout=TIMEOUT,
                verify=verify,
                cert=settings.client_cert,
            )
    except requests.RequestException as e:
        return Listing(shown, "unreachable", detail=mask_url(type(e).__name__))
    if resp.status_code in (401, 403):
        return Listing(shown, "refused", detail=f"HTTP {resp.status_code}")
    if resp.status_code == 404:
        return Listing(shown, "absent")
    if resp.status_code >= 400:
        return Listing(shown, "unreachable", detail=f"HTTP {resp.status_code}")
    try:
        files = _parse(name, resp.content, resp.headers.get("Content-Type", ""))
    except ValueError:
        return Listing(shown, "unreachable", detail="an unreadable page")
    if project_page or files:
        return Listing(shown, "listed" if files else "absent", files)
    return Listing(shown, "absent")


_SESSION: list[Any] = []
_SESSION_LOCK = threading.Lock()


def _session() -> Any:
    """One HTTP session for every page read in this process (its connections kept alive
    from page to page, and from plan to plan), retrying by the project's one policy as pip
    retries an index."""
    with _SESSION_LOCK:
        if not _SESSION:
            from torchx_nb import http_retry

            _SESSION.append(http_retry.session(pool_connections=8, pool_maxsize=16))
        return _SESSION[0]


def _folder(folder: Path, name: str, shown: str) -> Listing:
    """A find-links folder, or a ``file://`` index's project folder (its index.html, else
    its files)."""
    page = folder / "index.html"
    try:
        if page.is_file():
            files = _parse(name, page.read_bytes(), "text/html")
        else:
            files = tuple(
                f
                for entry in sorted(os.listdir(folder))
                if (f := _file(name, entry, None, str(folder / entry))) is not None
            )
    except OSError:
        return Listing(shown, "absent")
    return Listing(shown, "listed" if files else "absent", files)


def _index_page(base: str, name: str, settings: IndexSettings) -> Listing:
    from packaging.utils import canonicalize_name

    project = f"{base.rstrip('/')}/{canonicalize_name(name)}/"
    if base.startswith("file:"):
        path = Path(urllib.request.url2pathname(urllib.parse.urlsplit(project).path))
        return _folder(path, name, mask_url(base))
    return _http(project, name, settings, True, mask_url(base.rstrip("/")))


def _find_links(link: str, name: str, settings: IndexSettings) -> Listing:
    if link.startswith(("http://", "https://")):
        return _http(link, name, settings, False, f"find-links {mask_url(link)}")
    path = file_url_path(link) or link
    return _folder(Path(path).expanduser(), name, f"find-links {mask_url(link)}")


def default_index() -> str | None:
    """pip's default index (None when pip cannot say)."""
    try:
        from pip._internal.models.index import PyPI
    except ImportError:
        return None
    return str(PyPI.simple_url)


def listings(settings: IndexSettings, name: str) -> list[Listing]:
    """What every source pip would consult says about ``name``, in pip's order."""
    bases = settings.indexes()
    if not settings.no_index and not settings.index_url:
        default = default_index()
        bases = [default, *bases] if default else bases
    out = [_index_page(b, name, settings) for b in bases]
    out += [_find_links(link, name, settings) for link in settings.find_links]
    return out


def all_listings(settings: IndexSettings, names: list[str]) -> dict[str, list[Listing]]:
    """``listings`` for several names, on threads (each is one page per source)."""
    if not names:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
        return dict(zip(names, pool.map(lambda n: listings(settings, n), names), strict=True))


def fitting(found: list[Listing], version: str, image: ImageContents) -> list[ServedFile]:
    """The wheels of ``version`` that install on the image's Python."""
    from packaging.version import InvalidVersion, Version

    ok = _accepted(image.python or "", image.arch, image.libc, image.glibc)
    try:
        want = Version(version)
    except InvalidVersion:
        return []
    out = []
    for listing in found:
        for f in listing.files:
            if f.tags & ok and f.version is not None and Version(f.version) == want:
                out.append(f)
    return out


@lru_cache(maxsize=16)
def _accepted(python: str, arch: str, libc: str, glibc: str | None) -> frozenset[str]:
    """The tags (as text) an image's Python accepts: computed once per kind of image (a few
    thousand tags; every distribution of a plan asks)."""
    image = ImageContents(python, "", (), arch=arch, libc=libc, glibc=glibc)
    return frozenset(str(t) for t in image_tags(image))


def served(found: list[Listing], version: str, image: ImageContents) -> bool | None:
    """Whether an index serves a wheel of ``version`` for the image (None: some source could
    not be read, so it is not known)."""
    if fitting(found, version, image):
        return True
    if any(x.state in ("refused", "unreachable") for x in found):
        return None
    return False


def what_the_indexes_said(
    name: str, version: str, found: list[Listing], image: ImageContents
) -> str | None:
    """One clause saying why no index gave ``name`` ``version`` for the image, from what the
    sources said (None when a fitting wheel is listed: the index is not why)."""
    from packaging.version import InvalidVersion, Version

    if fitting(found, version, image):
        return None
    python, platform = image.python, image.platform
    for x in found:
        if x.state == "refused":
            return f"index {x.source} refused the credentials ({x.detail})"
    for x in found:
        if x.state == "unreachable":
            return f"index {x.source} is unreachable ({x.detail})"
    try:
        want = Version(version)
    except InvalidVersion:
        return f"{version!r} is not a version"
    same = [
        f for x in found for f in x.files if f.version is not None and Version(f.version) == want
    ]
    wheels = sorted({t for f in same for t in f.tags})
    if wheels:
        more = f" and {len(wheels) - 6} more" if len(wheels) > 6 else ""
        return (
            f"no index has a wheel of {name} {version} for Python {python} on {platform}"
            f" (its wheels are tagged {', '.join(wheels[:6])}{more})"
        )
    if same:
        return f"no index has a wheel of {name} {version}, only its source distribution"
    versions = sorted(
        {f.version for x in found for f in x.files if f.version},
        key=lambda v: Version(v) if _valid(v) else Version("0"),
    )
    if not versions:
        return f"no index lists {name}"
    return f"no index has {name} {version} (the versions listed: {', '.join(versions[-5:])})"


def _valid(version: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        return False
    return True
