"""Unique, Kubernetes-name-safe app ids (``echo-k3x9...``)."""

from __future__ import annotations

import re
import secrets

_FIRST = "bcdfghjklmnpqrstvwxz"
_REST = _FIRST + "012345679"


def random_id() -> str:
    """16 characters (about 64 bits) starting with a letter; no vowels, so no accidental words."""
    n = secrets.randbits(64)
    out = [_FIRST[n % len(_FIRST)]]
    n //= len(_FIRST)
    while len(out) < 14:
        out.append(_REST[n % len(_REST)])
        n //= len(_REST)
    return "".join(out)


def safe_name(name: str, max_len: int = 64) -> str:
    """``name`` reduced to letters, digits, ``_`` and ``-`` (anything else becomes ``-``), so
    that an app id can be a folder name, a shell word and a label value: a hostile job name
    (``$(rm -rf ~)``, ``../../x``, quotes) is harmless."""
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-_")[:max_len].strip("-_")
    return cleaned or "app"


def make_unique(name: str) -> str:
    """``NAME-RANDOMID`` with ``NAME`` made safe by ``safe_name``."""
    return f"{safe_name(name)}-{random_id()}"
