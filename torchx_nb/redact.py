"""Masking of secret-looking values before anything is shown (dry runs, widgets, the REST API)."""

from __future__ import annotations

import re
from typing import Any

MASK = "****"

SECRET_KEY_RE = re.compile(
    r"(secret|token|passw(or)?d|passwd|credential|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|session[_-]?key|auth|signature|^key$|_key$)",
    re.IGNORECASE,
)
_INLINE_RE = re.compile(
    r"(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P<sep>\s*[=:]\s*)(?P<val>\"[^\"]*\"|'[^']*'|[^\s,;]+)"
)
_VALUE_PATTERNS = [
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    re.compile(r"\bASIA[0-9A-Z]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
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
    for pat in _VALUE_PATTERNS:
        out = pat.sub(MASK, out)
    return out


def redact(obj: Any) -> Any:
    """A copy of a JSON-like structure with secret-looking values masked. Dicts whose key looks
    secret, ``{"name": K, "value": V}`` pairs (AWS env lists) and strings are all handled."""
    if isinstance(obj, dict):
        name = obj.get("name") if isinstance(obj.get("name"), str) else None
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            if (isinstance(k, str) and is_secret_key(k) and isinstance(v, (str, int, float))) or (
                k == "value" and name is not None and is_secret_key(name)
            ):
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
