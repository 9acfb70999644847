"""Unique, Kubernetes-name-safe app ids (``echo-k3x9...``)."""

from __future__ import annotations

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


def make_unique(name: str) -> str:
    return f"{name}-{random_id()}"
