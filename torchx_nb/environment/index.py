"""The package indexes the kernel's pip uses, as uv is told about them: pip's ``index-url``
(or its default index), ``extra-index-url`` and ``find-links``, searched as pip searches them
(the best version across all of them), with pip's TLS settings (``cert``, ``client-cert``,
``trusted-host``) and its credential sources (URLs, netrc, keyring). Everything reaches uv
through its environment, never its command line (``ps`` shows a command line to every user),
and credentials in a URL are masked wherever they are shown."""

from __future__ import annotations

import hashlib
import os
import shutil
import urllib.parse
import urllib.request
from dataclasses import dataclass

from torchx_nb.redact import mask_url as mask_url  # the one URL masking, shared

# uv's own index settings, dropped from what it inherits: pip's are the ones that count
_UV_INDEX_VARS = frozenset(
    {
        "UV_INDEX",
        "UV_DEFAULT_INDEX",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "UV_FIND_LINKS",
        "UV_NO_INDEX",
        "UV_INDEX_STRATEGY",
        "UV_KEYRING_PROVIDER",
        "UV_INSECURE_HOST",
        "UV_CONSTRAINT",
        "UV_OVERRIDE",
        "UV_EXCLUDE",
        "UV_CONFIG_FILE",
        "SSL_CERT_FILE",
        "SSL_CLIENT_CERT",
    }
)
# pip's behaviour: every index's versions are candidates and the best one wins (uv's default,
# first-index, stops at the first index listing a name; see docs/environment.md)
INDEX_STRATEGY = "unsafe-best-match"


def file_url_path(url: str) -> str | None:
    """The local path a ``file:`` URL names, percent-decoded (pip records
    ``file:///home/u/My%20Projects/pkg`` for the folder ``/home/u/My Projects/pkg``); None
    for any other URL."""
    if not url.startswith("file:"):
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.netloc in ("", "localhost"):
        return urllib.request.url2pathname(parts.path)
    return urllib.request.url2pathname(parts.netloc + parts.path)  # file://./pkg, as written


def uv_message(text: str, limit: int = 400) -> str:
    """uv's output as one plain line for the user: no ANSI codes, credentials masked, its
    last ``limit`` characters."""
    from torchx_nb.specs.failure import strip_escapes

    # a carriage return (uv's progress) parts words, as a space would
    plain = strip_escapes(text.replace("\r", "\n"))
    return mask_url(" ".join(plain.split())[-limit:])


@dataclass(frozen=True)
class IndexSettings:
    """Where distributions are looked up: pip's primary index (None: pip's default), extra
    indexes and find-links folders or pages, and how they are reached (a CA bundle, a client
    certificate, hosts trusted without TLS checks, pip's keyring provider)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    no_index: bool = False
    cert: str | None = None
    client_cert: str | None = None
    trusted_hosts: tuple[str, ...] = ()
    keyring_provider: str | None = None

    def uv_args(self) -> list[str]:
        """uv's arguments: only ``--no-index`` (no URL: those go through ``uv_env``)."""
        return ["--no-index"] if self.no_index else []

    def uv_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment uv runs with (``base``, else this process's): these indexes,
        pip's strategy, TLS settings and keyring; no colours or progress bars."""
        env = {
            k: v
            for k, v in (os.environ if base is None else base).items()
            if k not in _UV_INDEX_VARS
        }
        env.update(NO_COLOR="1", UV_NO_PROGRESS="1", UV_INDEX_STRATEGY=INDEX_STRATEGY)
        if not self.no_index:
            if self.index_url:
                env["UV_INDEX_URL"] = self.index_url
            if self.extra_index_urls:
                env["UV_EXTRA_INDEX_URL"] = " ".join(self.extra_index_urls)
        if self.find_links:
            env["UV_FIND_LINKS"] = ",".join(self.find_links)
        if self.cert:
            env["SSL_CERT_FILE"] = self.cert
        if self.client_cert:
            env["SSL_CLIENT_CERT"] = self.client_cert
        if self.trusted_hosts:
            env["UV_INSECURE_HOST"] = " ".join(self.trusted_hosts)
        if self.uses_keyring():
            env["UV_KEYRING_PROVIDER"] = "subprocess"
        return env

    def uses_keyring(self) -> bool:
        """Whether pip would ask keyring for credentials (its ``keyring-provider``: auto,
        import or subprocess) and a ``keyring`` command is there for uv to ask."""
        provider = (self.keyring_provider or "auto").lower()
        return provider != "disabled" and shutil.which("keyring") is not None

    def indexes(self) -> list[str]:
        """The index URLs pip would consult, in its order (None stands for pip's default
        index, which is not named here)."""
        if self.no_index:
            return []
        return [u for u in (self.index_url, *self.extra_index_urls) if u]

    def fingerprint(self) -> str:
        """A digest of these settings (for marks on disk: no URL or credential in clear)."""
        return hashlib.sha256(repr(self).encode()).hexdigest()

    def describe(self) -> str:
        """One line, credentials masked."""
        parts = []
        if self.no_index:
            parts.append("no index")
        else:
            parts.append(mask_url(self.index_url) if self.index_url else "pip's default index")
            parts += [mask_url(u) for u in self.extra_index_urls]
        parts += [f"find-links {mask_url(u)}" for u in self.find_links]
        return ", ".join(parts)
