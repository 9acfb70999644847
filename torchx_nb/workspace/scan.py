"""Secret-shaped content in the files a workspace would ship, found by detect-secrets' detectors
(private keys, cloud and service tokens, passwords in URLs, credential-like assignments) and
the token shapes the masking knows (``torchx_nb.redact.TOKEN_SHAPES``).

A name list can never be complete (a key saved as ``deploy_key``, a service-account JSON under
gcloud's download name, a hard link to ``~/.ssh/id_rsa``), so every shipped file is read. An
RE2 prefilter passes only lines with a trigger word or shape to the detectors, which keeps a
200 MB workspace to well under a second; verdicts are cached by content hash (a file whose
size, times and inode are unchanged is not even re-read), so re-running a cell rescans only
what changed. A line holding ``pragma: allowlist secret`` (detect-secrets' marker) is not a
hit."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import IO, Any

SCAN_VERSION = 1
CHUNK = 4 << 20
WINDOW = 2048
MAX_CARRY = 64 << 10
CACHE_MAX_ENTRIES = 200_000
ALLOWLIST_MARK = "pragma: allowlist secret"

# detect-secrets' detectors we run; its entropy and IP detectors flag too much ordinary data
DETECTORS = (
    "AWSKeyDetector",
    "AzureStorageKeyDetector",
    "BasicAuthDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "JwtTokenDetector",
    "KeywordDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PrivateKeyDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "SquareOAuthDetector",
    "StripeDetector",
)

# A line can hold a secret only if it has one of these (case-insensitive); the detectors run on
# such lines alone.
_TRIGGER = (
    rb"(?i)pass|pwd|secret|token|credential|auth|contrase|private|key|://|akia|asia|abia|acca"
    rb"|a3t|gh[pousr]_|github_pat_|gl[a-z]*-|gr1348941|eyj|npm_|sk-|[rs]k_live|[rs]k_test"
    rb"|pypi-|sg\.|xox|sq0csp-|hf_|aiza|ya29\."
)

# What detect-secrets does not cover: tokens assigned as literals (a Jupyter config's
# c.ServerApp.token, a cargo or pip token), a registry login's "auth", a password element.
_EXTRA = [
    (
        "credential assignment",
        r"(?i)(?:^|[^a-z0-9])[\w.-]*(?:token|secret|api[_-]?key|access[_-]?key|auth[_-]?key"
        r"|passw(?:or)?d|passphrase)[\w.-]*[\"']?\s*[:=]\s*"
        r"(?:[\"']([^\"'\s]{12,})[\"']|([A-Za-z0-9/+=_-]{20,})\s*$)",
    ),
    ("registry credentials", r"\"(?:auth|identitytoken)\"\s*:\s*\"([A-Za-z0-9+/=_.-]{12,})\""),
    (
        "password element",
        r"(?i)<(?:password|passwd|secret|token|api_?key|access_?key)>\s*([^<\s]{4,})\s*</",
    ),
]
_PLACEHOLDER = re.compile(
    r"^(?:\$\{.*\}|\{\{.*\}\}|<.*>|%\(.*\)s?|\$[A-Za-z_]\w*|x+|\*+|\.+|changeme|your[\w-]*|"
    r"example[\w-]*|placeholder|none|null|true|false)$",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Finding:
    """A secret-shaped value in a file: what kind, and on which line (1-based)."""

    kind: str
    line: int

    def describe(self) -> str:
        return f"{self.kind} on line {self.line}"


@cache
def _trigger() -> Any:
    import re2

    return re2.compile(_TRIGGER)


@cache
def _import_detect_secrets() -> None:
    """Import detect-secrets without its side effect: its logging module calls
    ``logging.captureWarnings(True)`` at import, which would send every Python warning after
    the first scan (ours about secrets that ship, and the user's own) to a logger with no
    handler, for the rest of the process. Warnings stay routed as they were."""
    import logging
    import warnings

    before = warnings.showwarning
    import detect_secrets.core.plugins.util
    import detect_secrets.filters.heuristic  # noqa: F401

    if warnings.showwarning is not before:
        logging.captureWarnings(False)
        warnings.showwarning = before


@cache
def _detectors() -> list[Any]:
    _import_detect_secrets()
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    mapping: dict[str, Any] = get_mapping_from_secret_type_to_class()
    classes = {c.__name__: c for c in mapping.values()}
    return [classes[name]() for name in DETECTORS if name in classes]


@cache
def _extra() -> list[tuple[str, re.Pattern[str]]]:
    from torchx_nb.redact import TOKEN_SHAPES

    return [(kind, re.compile(p)) for kind, p in TOKEN_SHAPES + _EXTRA]


def _real_value(value: str) -> bool:
    """A literal worth calling a secret: not a placeholder, and with a digit and a letter."""
    v = value.strip("\"'")
    return (
        not _PLACEHOLDER.match(v)
        and any(c.isdigit() for c in v)
        and any(c.isalpha() for c in v)
        and len(set(v)) > 4
    )


def _filtered(secret: str, line: str, plugin: Any) -> bool:
    """detect-secrets' own heuristics for values that are not secrets (templates, ids,
    ``$VAR``, indirect references)."""
    _import_detect_secrets()
    from detect_secrets.filters import heuristic as h

    return bool(
        h.is_templated_secret(secret)
        or h.is_prefixed_with_dollar_sign(secret)
        or h.is_sequential_string(secret)
        or h.is_indirect_reference(line)
        or h.is_not_alphanumeric_string(secret)
        or h.is_likely_id_string(secret, line, plugin)
        or (plugin.__class__.__name__ == "KeywordDetector" and h.is_potential_uuid(secret))
    )


def check_line(filename: str, line: str) -> str | None:
    """The kind of secret on ``line`` of ``filename``, or None."""
    if ALLOWLIST_MARK in line:
        return None
    for plugin in _detectors():
        try:
            found = plugin.analyze_line(filename=filename, line=line, line_number=0)
        except Exception:
            continue
        for secret in found:
            value = secret.secret_value or ""
            if not _filtered(value, line, plugin):
                return str(secret.type)
    for kind, pattern in _extra():
        for m in pattern.finditer(line):
            groups = [g for g in m.groups() if g]
            if not groups or _real_value(groups[0]):
                return kind
    return None


def _candidate_lines(f: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    """(line number, text around a trigger) for every line of ``f`` with a trigger. The file
    is read in chunks, never held whole; a line longer than MAX_CARRY is scanned in pieces."""
    trigger = _trigger()
    carry = b""
    lineno = 1
    while True:
        chunk = f.read(CHUNK)
        buf = carry + chunk
        cut = buf.rfind(b"\n") + 1 if chunk else len(buf)
        if cut == 0 and len(buf) > MAX_CARRY:
            body, carry = buf, buf[-WINDOW:]  # one huge line: scan it, keep a tail for context
        else:
            body, carry = buf[:cut], buf[cut:]
        last_line_end = -1
        counted_to = counted = 0
        for m in trigger.finditer(body):
            pos = m.start()
            if pos < last_line_end:
                continue
            start = body.rfind(b"\n", 0, pos) + 1
            stop = body.find(b"\n", pos)
            stop = len(body) if stop < 0 else stop
            counted += body.count(b"\n", counted_to, start)
            counted_to = start
            last_line_end = stop
            yield lineno + counted, body[max(start, pos - WINDOW) : min(stop, pos + WINDOW)]
        lineno += body.count(b"\n")
        if not chunk:
            return


def scan_stream(f: IO[bytes], filename: str) -> Finding | None:
    """The first secret in ``f``, or None."""
    for lineno, raw in _candidate_lines(f):
        kind = check_line(filename, raw.decode("utf-8", errors="replace"))
        if kind is not None:
            return Finding(kind, lineno)
    return None


def _sha256(f: IO[bytes]) -> str:
    digest = hashlib.sha256()
    while chunk := f.read(CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


class ScanCache:
    """Verdicts by content hash (and the hash by path and stat), kept in a private JSON file
    beside the job store. Only kinds and line numbers are stored, never a value."""

    def __init__(self, path: Path | None) -> None:
        self.path: Path | None = path
        self.by_stat: dict[str, str] = {}
        self.by_hash: dict[str, list[Any] | None] = {}
        self._dirty = False
        self._lock = threading.Lock()
        if path is not None:
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                data = json.loads(path.read_text())
                if data.get("version") == SCAN_VERSION:
                    self.by_stat = dict(data["stat"])
                    self.by_hash = dict(data["hash"])

    def readonly(self) -> ScanCache:
        """This cache, never written back (for dry runs and previews)."""
        self.path = None
        return self

    def verdict(self, key: str) -> tuple[bool, Finding | None]:
        """(known, finding) for a content hash key."""
        with self._lock:
            if key not in self.by_hash:
                return False, None
            v = self.by_hash[key]
        return True, (Finding(str(v[0]), int(v[1])) if v else None)

    def remember(self, stat_key: str, hash_key: str, finding: Finding | None) -> None:
        with self._lock:
            self.by_stat[stat_key] = hash_key
            self.by_hash[hash_key] = [finding.kind, finding.line] if finding else None
            self._dirty = True

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        from torchx_nb.paths import private_dir, write_private

        with self._lock:
            stat = dict(list(self.by_stat.items())[-CACHE_MAX_ENTRIES:])
            used = set(stat.values())
            hashes = {k: v for k, v in self.by_hash.items() if k in used}
            payload = json.dumps({"version": SCAN_VERSION, "stat": stat, "hash": hashes})
            self._dirty = False
        with contextlib.suppress(OSError):
            private_dir(self.path.parent)
            write_private(self.path, payload)


def default_cache() -> ScanCache:
    from torchx_nb.paths import data_dir

    try:
        return ScanCache(data_dir() / "scan-cache.json")
    except Exception:
        return ScanCache(None)


def _file_type(rel: str) -> str:
    """What the detectors' verdict may depend on besides the content: the file's extension."""
    return os.path.splitext(rel)[1].lower()


def scan_files(
    root: Path, files: Iterable[Any], cache: ScanCache | None = None
) -> dict[str, Finding]:
    """Secrets in the regular files ``files`` (``WorkspaceFile``s) under ``root``, by relative
    path. Files are opened without following symlinks: one swapped or removed since it was
    listed is an error ("run again"), never followed."""
    from torchx_nb.workspace.safe_open import open_regular

    cache = cache if cache is not None else default_cache()
    found: dict[str, Finding] = {}
    for wf in files:
        if wf.link is not None:
            continue
        stat_key = f"{root}/{wf.path}\0{wf.inode}\0{wf.size}\0{wf.mtime_ns}\0{wf.ctime_ns}"
        hashed = cache.by_stat.get(stat_key)
        if hashed is not None:
            known, finding = cache.verdict(hashed)
            if known:
                if finding is not None:
                    found[wf.path] = finding
                continue
        with open_regular(root / wf.path) as (f, _):
            hash_key = f"{_sha256(f)}:{_file_type(wf.path)}"
            known, finding = cache.verdict(hash_key)
            if not known:
                f.seek(0)
                finding = scan_stream(f, wf.path)
        cache.remember(stat_key, hash_key, finding)
        if finding is not None:
            found[wf.path] = finding
    cache.save()
    return found
