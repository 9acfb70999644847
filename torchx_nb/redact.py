"""Masking of secret-looking values before anything is shown (dry runs, widgets, the REST API)."""

from __future__ import annotations

import re
from typing import Any

MASK = "****"

SECRET_KEY_RE = re.compile(
    r"(secret|token|passw(or)?d|passwd|credential|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|session[_-]?key|auth(?!or)|signature|^key$|_key$|^pat$|_pat$|^dsn$|_dsn$)",
    re.IGNORECASE,
)
_INLINE_RE = re.compile(
    r"(?<![A-Za-z0-9_.-])(?P<key>[A-Za-z_][A-Za-z0-9_.-]{0,127})(?P<sep>\s*[=:]\s*)"
    r"(?P<val>\"[^\"]*\"|'[^']*'|[^\s,;]+)"
)
# "Authorization: Bearer X", "-H 'Authorization: token X'", "Basic X"
_SCHEME_RE = re.compile(r"(?i)(?<![A-Za-z0-9])(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{8,}")
# scheme://user:password@host
_URL_PASSWORD_RE = re.compile(r"(?i)([a-z][a-z0-9+.-]{0,30}://[^/\s:@]{0,256}:)[^/\s@]{1,512}@")
_VALUE_PATTERNS = [
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bASIA[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{20,}"),
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"),
    re.compile(r"\bnpm_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bpypi-[A-Za-z0-9_-]{50,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}\b"),
    re.compile(r"\bya29\.[A-Za-z0-9_-]{20,}\b"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
]


def is_secret_key(key: str) -> bool:
    """True for names like ``AWS_SECRET_ACCESS_KEY``, ``db_password`` or ``HF_TOKEN``."""
    return bool(SECRET_KEY_RE.search(key))


def redact_text(text: str) -> str:
    """``text`` with ``KEY=value`` pairs of secret-looking keys and well-known token shapes
    masked."""

    def inline(m: re.Match[str]) -> str:
        if is_secret_key(m.group("key")):
            return f"{m.group('key')}{m.group('sep')}{MASK}"
        return m.group(0)

    out = _INLINE_RE.sub(inline, text)
    out = _SCHEME_RE.sub(lambda m: f"{m.group(1)}{m.group(2)}{MASK}", out)
    out = _URL_PASSWORD_RE.sub(lambda m: f"{m.group(1)}{MASK}@", out)
    for pat in _VALUE_PATTERNS:
        out = pat.sub(MASK, out)
    return out


def redact(obj: Any) -> Any:
    """A copy of a JSON-like structure with secret-looking values masked. Dicts whose key looks
    secret, ``{"name": K, "value": V}`` and ``{"Key": K, "Value": V}`` pairs (AWS env lists and
    tags: only V is masked, and only when K looks secret) and strings are all handled."""
    if isinstance(obj, dict):
        name = _pair_name(obj)
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if name is not None and isinstance(k, str) and k.lower() in ("name", "key"):
                out[k] = v
            elif name is not None and isinstance(k, str) and k.lower() == "value":
                out[k] = MASK if is_secret_key(name) else redact(v)
            elif isinstance(k, str) and is_secret_key(k) and isinstance(v, (str, int, float)):
                out[k] = MASK
            else:
                out[k] = redact(v)
        return out
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(redact(v) for v in obj)
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def _pair_name(obj: dict[Any, Any]) -> str | None:
    """K of a ``{"name"|"Key": K, "value"|"Value": V}`` pair, else None."""
    keys = {k.lower(): k for k in obj if isinstance(k, str)}
    if "value" not in keys:
        return None
    for label in ("name", "key"):
        if label in keys and isinstance(obj[keys[label]], str):
            return str(obj[keys[label]])
    return None
