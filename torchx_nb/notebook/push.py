"""``--push a,b``: kernel variables pickled (cloudpickle) into the cell job's namespace, checked
before anything is built or submitted."""

from __future__ import annotations

import keyword
from collections.abc import Mapping
from typing import Any

from torchx_nb.specs.api import TorchxNbError

PUSH_LIMIT = 64 * 1024 * 1024  # bytes, all pushed variables together


def push_names(spec: str) -> list[str]:
    """``a,b`` as variable names; anything else is one line naming the bad one."""
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise TorchxNbError("--push needs variable names, e.g. --push df,model")
    for name in names:
        if not name.isidentifier() or keyword.iskeyword(name):
            raise TorchxNbError(f"--push: {name!r} is not a Python variable name")
    return list(dict.fromkeys(names))


def pickle_push(namespace: Mapping[str, Any], names: list[str], limit: int = PUSH_LIMIT) -> bytes:
    """The variables, each pickled with cloudpickle, in one pickled ``{name: bytes}``; a missing
    or unpicklable variable, or a total over ``limit`` bytes, is one line naming it."""
    import pickle

    import cloudpickle

    values: dict[str, bytes] = {}
    for name in names:
        if name not in namespace:
            raise TorchxNbError(f"--push: {name} is not defined in the kernel")
        try:
            data = cloudpickle.dumps(namespace[name])
        except Exception as e:
            raise TorchxNbError(
                f"--push: {name} ({type(namespace[name]).__name__}) cannot be pickled: {e}"
            ) from None
        if len(data) > limit:
            raise TorchxNbError(
                f"--push: {name} is {_size(len(data))} pickled, over the {_size(limit)} limit;"
                " write it to a file in the workspace instead"
            )
        values[name] = data
    payload = pickle.dumps(values, protocol=pickle.HIGHEST_PROTOCOL)
    if len(payload) > limit:
        raise TorchxNbError(
            f"--push: {', '.join(names)} are {_size(len(payload))} pickled together, over the"
            f" {_size(limit)} limit; write the big ones to files in the workspace instead"
        )
    return payload


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"
