"""Clients that are injected (tests, emulators) or made on first use (SDKs import slowly)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class LazyClient:
    """A class attribute reading ``obj.<slot>``: the injected client, else the one ``make(obj)``
    makes on first use (kept there)."""

    def __init__(self, make: Callable[[Any], Any], slot: str = "_client") -> None:
        self.make = make
        self.slot = slot

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        if getattr(obj, self.slot, None) is None:
            setattr(obj, self.slot, self.make(obj))
        return getattr(obj, self.slot)
