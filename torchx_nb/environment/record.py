"""What a job ran, beside what this kernel has: the plan's distributions shipped to the job
(``.torchx-nb/plan.json``, beside the runner), and the job's own record of the distributions
its Python imported (``environment.json`` in its outputs, written by the cell and notebook
runners: torchx_nb/apps/cell_runner/env_record.py), read back and compared with this kernel's."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from torchx_nb.specs.exceptions import NoResult

if TYPE_CHECKING:
    from torchx_nb.environment.plan import EnvPlan

PLAN_FILE = ".torchx-nb/plan.json"
RECORD_FILE = ".torchx-nb/environment.json"
_MAX_BYTES = 4 << 20
_SHOWN = re.compile(r"[^A-Za-z0-9._+!-]")  # what a name or version may show (the job's text)


def plan_file(plan: EnvPlan) -> bytes:
    """The plan's distributions for the job: those the layer adds and those kept from the
    image, each with the version the job should import."""
    rows = [{"name": i.name, "version": i.version, "from": "layer"} for i in plan.add]
    rows += [{"name": name, "version": version, "from": "image"} for name, version in plan.kept]
    return json.dumps({"distributions": rows}, sort_keys=True).encode()


def _clean(value: Any, limit: int = 80) -> str:
    return _SHOWN.sub("?", str(value))[:limit]


def _kernel_version(name: str) -> str | None:
    from importlib import metadata as md

    try:
        return md.version(name)
    except (md.PackageNotFoundError, ValueError):
        return None


@dataclass(frozen=True)
class RanDistribution:
    """One distribution the job ran, and this kernel's version of it."""

    name: str
    version: str
    origin: str  # layer | workspace | image
    planned: str | None  # the version the plan shipped or kept, when it named it
    kernel: str | None  # this kernel's version (None: not installed here)

    @property
    def differs(self) -> bool:
        return self.kernel != self.version


@dataclass(frozen=True, repr=False)
class JobEnvironment:
    """What the job recorded (``environment.json``) beside this kernel."""

    handle: str
    python: str
    executable: str
    distributions: tuple[RanDistribution, ...]

    def differences(self) -> list[RanDistribution]:
        return [d for d in self.distributions if d.differs]

    def lines(self) -> list[str]:
        """The head line, then one per distribution (the differences said on theirs)."""
        n, diff = len(self.distributions), len(self.differences())
        head = (
            f"{self.handle} ran {self.executable} (Python {self.python}):"
            f" {n} distribution{'s' if n != 1 else ''},"
            f" {diff} differ{'s' if diff == 1 else ''} from this kernel"
        )
        width = max((len(d.name) for d in self.distributions), default=0)
        vwidth = max((len(d.version) for d in self.distributions), default=0)
        rows = []
        for d in self.distributions:
            notes = []
            if d.differs:
                notes.append(f"this kernel has {d.kernel}" if d.kernel else "not in this kernel")
            if d.planned is not None and d.planned != d.version:
                notes.append(f"the plan had {d.planned}")
            note = f"  {'; '.join(notes)}" if notes else ""
            rows.append(f"  {d.name:<{width}}  {d.version:<{vwidth}}  {d.origin:<9}{note}".rstrip())
        return [head, *rows]

    def __repr__(self) -> str:
        return "\n".join(self.lines())


def read_record(stream: IO[bytes], handle: str) -> JobEnvironment:
    """The job's ``environment.json`` (the job's own text: shapes checked, values shown
    only as plain names and versions)."""
    raw = stream.read(_MAX_BYTES + 1)
    try:
        if len(raw) > _MAX_BYTES:
            raise ValueError("too large")
        doc = json.loads(raw)
        rows = [r for r in doc["distributions"] if isinstance(r, dict)]
    except (ValueError, KeyError, TypeError) as e:
        raise NoResult(f"{handle} left an unreadable environment record ({e})") from None
    dists = []
    for row in rows:
        name = _clean(row.get("name"))
        planned = row.get("planned")
        dists.append(
            RanDistribution(
                name,
                _clean(row.get("version")),
                _clean(row.get("from"), 12),
                _clean(planned) if planned is not None else None,
                _kernel_version(name),
            )
        )
    return JobEnvironment(
        handle,
        _clean(doc.get("python"), 20),
        _clean_path(doc.get("executable")),
        tuple(sorted(dists, key=lambda d: d.name.lower())),
    )


def _clean_path(value: Any) -> str:
    return re.sub(r"[^A-Za-z0-9._/+-]", "?", str(value))[:200]
