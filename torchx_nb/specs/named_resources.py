"""The named-resource library: ``named_resources["gpu.small"]`` and friends."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from torchx_nb.specs.api import NULL_RESOURCE, Resource
from torchx_nb.specs.exceptions import UnknownNamedResourceError as UnknownNamedResourceError


class _NamedResourcesLibrary:
    """Lookup of named resources; each ``[name]`` builds a fresh Resource."""

    def __init__(self) -> None:
        self._factories: dict[str, Callable[[], Resource]] | None = None

    def _load(self) -> dict[str, Callable[[], Resource]]:
        if self._factories is None:
            from torchx_nb.specs import (
                named_resources_aws,
                named_resources_gcp,
                named_resources_generic,
            )

            factories: dict[str, Callable[[], Resource]] = {
                "NULL": lambda: NULL_RESOURCE,
                "MISSING": lambda: NULL_RESOURCE,
            }
            factories.update(named_resources_generic.NAMED_RESOURCES)
            factories.update(named_resources_aws.NAMED_RESOURCES)
            factories.update(named_resources_gcp.NAMED_RESOURCES)
            factories.update(_entry_point_resources())
            self._factories = factories
        return self._factories

    def register(self, name: str, factory: Callable[[], Resource]) -> None:
        """Add a named resource at run time (entry points under ``torchx_nb.named_resources``
        are found automatically)."""
        self._load()[name] = factory

    def names(self) -> list[str]:
        return sorted(self._load())

    def __getitem__(self, key: str) -> Resource:
        factories = self._load()
        if key in factories:
            return factories[key]()
        close = difflib.get_close_matches(key, list(factories), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownNamedResourceError(
            f"unknown named resource {key!r}{hint} (list them with `torchx-nb resources`)"
        )

    def __contains__(self, key: object) -> bool:
        return key in self._load()


def _entry_point_resources() -> dict[str, Callable[[], Resource]]:
    from importlib.metadata import entry_points

    out: dict[str, Callable[[], Resource]] = {}
    for ep in entry_points(group="torchx_nb.named_resources"):
        out[ep.name] = ep.load()
    return out


named_resources = _NamedResourcesLibrary()


def get_named_resources(res: str) -> Resource:
    """Same as ``named_resources[res]``."""
    return named_resources[res]
