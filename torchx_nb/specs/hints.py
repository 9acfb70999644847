"""Reading type hints: what component parameters and option fields are declared as."""

from __future__ import annotations

import types
import typing
from typing import Any


def unwrap_optional(tp: Any) -> Any:
    """``X | None`` (or ``Optional[X]``) -> ``X``; any other hint as it is."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp
