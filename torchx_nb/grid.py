"""The parameter grid of a sweep: ``-p NAME=V1,V2`` lists, typed from their literals, combined
as a product (or zipped), checked before anything is built or submitted."""

from __future__ import annotations

import itertools
import keyword
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from torchx_nb.specs.exceptions import BadGrid as BadGrid

MAX_POINTS = 1000
Value = int | float | bool | str
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?|[+-]?(inf|nan)")


def typed(text: str) -> Value:
    """A value typed from its literal: ``3`` int, ``0.1``/``1e-3`` float, ``true``/``False``
    bool, anything else (quotes stripped) str."""
    t = text.strip()
    if _INT.fullmatch(t):
        return int(t)
    if _FLOAT.fullmatch(t):
        return float(t)
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    return t


def parse_param(spec: str) -> tuple[str, list[Value]]:
    """``NAME=V1,V2,...`` as the name and its typed values."""
    name, eq, values = spec.partition("=")
    name = name.strip()
    if not eq:
        raise BadGrid(f"-p {spec!r}: expected NAME=V1,V2,... (e.g. -p lr=0.1,0.01)")
    check_name(name)
    items = [v for v in values.split(",")]
    if not values.strip() or any(not v.strip() for v in items):
        raise BadGrid(f"-p {name}: an empty value in {values!r}; list values as {name}=V1,V2")
    return name, [typed(v) for v in items]


# the columns of a sweep's results() beside its parameters: a parameter may not shadow one
RESULT_COLUMNS = ("trial", "state", "exit_code", "result", "error", "handle")


def check_name(name: str) -> None:
    """A parameter name: a Python identifier that is neither a dunder (``__builtins__``,
    ``__name__``: the cell's namespace needs them) nor a column of ``results()``."""
    if not name.isidentifier() or keyword.iskeyword(name) or not name.isascii():
        raise BadGrid(
            f"-p {name!r}: a parameter name must be a Python identifier (letters, digits, _)"
        )
    if name.startswith("__") and name.endswith("__"):
        raise BadGrid(f"-p {name}: names with two underscores on each side are Python's; rename it")
    if name in RESULT_COLUMNS:
        raise BadGrid(
            f"-p {name}: {name!r} is a column of the sweep's results"
            f" ({', '.join(RESULT_COLUMNS)}); rename the parameter"
        )


@dataclass(frozen=True)
class Grid:
    """The points of a sweep, in order: the product of the lists (the last one varies
    fastest), or with ``zip`` the i-th value of each list."""

    params: tuple[tuple[str, tuple[Value, ...]], ...]
    zipped: bool = False

    @classmethod
    def of(
        cls, params: Mapping[str, Sequence[Value]] | Sequence[str], zipped: bool = False
    ) -> Grid:
        """From ``{"lr": [0.1, 0.01]}`` or ``["lr=0.1,0.01", ...]``; every rule checked."""
        pairs: list[tuple[str, list[Value]]] = []
        if isinstance(params, Mapping):
            for name, values in params.items():
                check_name(name)
                pairs.append((name, list(values)))
        else:
            pairs = [parse_param(p) for p in params]
        if not pairs:
            raise BadGrid("a sweep needs at least one parameter: -p NAME=V1,V2,...")
        seen: set[str] = set()
        for name, values in pairs:
            if name in seen:
                raise BadGrid(f"-p {name} is given twice; list all its values in one -p")
            seen.add(name)
            if not values:
                raise BadGrid(f"-p {name} has no values; list them as {name}=V1,V2")
            for v in values:
                if not isinstance(v, (int, float, bool, str)):
                    raise BadGrid(f"-p {name}: {v!r} is not an int, float, bool or str")
        if zipped and len({len(v) for _, v in pairs}) > 1:
            lengths = ", ".join(f"{n}: {len(v)}" for n, v in pairs)
            raise BadGrid(f"--zip pairs lists of one length; these differ ({lengths})")
        grid = cls(tuple((n, tuple(v)) for n, v in pairs), zipped)
        if len(grid) > MAX_POINTS:
            raise BadGrid(
                f"the grid has {len(grid)} points, over the limit of {MAX_POINTS}; split it"
                " into several sweeps or use --zip"
            )
        return grid

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.params]

    def __len__(self) -> int:
        if self.zipped:
            return len(self.params[0][1])
        n = 1
        for _, values in self.params:
            n *= len(values)
        return n

    def spec(self) -> dict[str, object]:
        """The grid as a native array's tasks receive it (``$TORCHX_NB_GRID``): its names,
        lists and mode, a size that grows with the lists, not with their product (AWS Batch
        takes job definitions of at most 24 KiB). The cell runner picks a task's point."""
        return {
            "names": self.names,
            "lists": [list(v) for _, v in self.params],
            "zip": self.zipped,
        }

    def points(self) -> list[dict[str, Value]]:
        names = self.names
        lists = [v for _, v in self.params]
        combos = zip(*lists, strict=True) if self.zipped else itertools.product(*lists)
        return [dict(zip(names, combo, strict=True)) for combo in combos]


def env_name(name: str) -> str:
    """``TORCHX_PARAM_<NAME>``: the environment variable a trial sees for a parameter."""
    return f"TORCHX_PARAM_{name.upper()}"


def env_value(value: Value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
