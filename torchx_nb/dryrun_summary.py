"""What a dry run shows first: a few lines saying what runs where, what ships and how big the
request is, so that a ``-j 2x2`` cell's dry run is five lines instead of 130 of JSON. The
whole request (exactly what would be sent, secret-looking values masked) and the workspace's
file table come after it: behind ``--json`` in the CLI, in collapsed sections in the
notebook. The sections follow the prepared run: the program, where it runs, the workspace,
the environment plan (the packages added to the image), the request."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

from torchx_nb.redact import redact, redact_text
from torchx_nb.runner import PreparedRun, Runner
from torchx_nb.specs.api import Role
from torchx_nb.specs.program import CellProgram, NotebookProgram

_LEFT_OUT = re.compile(r"^left out \((\d+)\):$", re.M)
_SECRETS_HEAD = "secrets that ship because "


@dataclass(frozen=True)
class DryRunSummary:
    """The compact lines, and the long parts they stand for."""

    lines: list[str]
    request: str  # the scheduler's whole request, as it prints it
    ships: str | None  # the workspace's table of files, when there is a workspace
    environment: str | None = None  # the environment plan's table, when one was made

    def text(self) -> str:
        return "\n".join(self.lines)

    def full(self) -> str:
        """Everything: the summary, the whole request, the workspace table."""
        parts = [self.text(), "", f"the whole request ({_size(self.request)}):", self.request]
        if self.ships:
            parts += ["", self.ships]
        if self.environment:
            parts += ["", self.environment]
        return "\n".join(parts)


def summarize(runner: Runner, prepared: PreparedRun, whole: str = "--json") -> DryRunSummary:
    """The dry run of ``prepared`` in a few lines; ``whole`` says where the whole request is
    (the CLI's ``--json``, the notebook's collapsed section)."""
    app = prepared.app
    images = runner.uses_images(prepared.scheduler)
    request = str(prepared.info)
    ships = prepared.preview
    lines = [
        f"dry run on {prepared.scheduler}: nothing built, pushed or submitted",
        f"program:   {_program(prepared, runner.get_scheduler(prepared.scheduler).rank0_env)}",
        f"runs:      {'; '.join(_role(r, images) for r in app.roles)}",
        f"ships:     {_ships(ships, prepared.workspace)}",
    ]
    lines += _secret_lines(ships)
    plan = prepared.environment
    if plan is not None:
        lines.append(f"packages:  {plan.summary()}")
        if plan.contents is not None and plan.add:
            lines.append(f"python:    {plan.contents.describe_python()}")
        lines += [f"warning:   {w}" for w in plan.warnings]
    lines.append(f"request:   {_size(request)}; the whole request: {whole}")
    table = plan.table() if plan is not None and plan.packages != "none" else None
    return DryRunSummary([redact_text(line) for line in lines], request, ships, table)


def _program(prepared: PreparedRun, rank0_env: str) -> str:
    """What runs, read from the prepared run's program (and whether its workspace runs it
    under the cell runner)."""
    program = prepared.program
    if isinstance(program, NotebookProgram):
        names = [name for name, _ in program.parameters]
        given = f"{len(names)} parameter{'s' if len(names) != 1 else ''}" + (
            f" ({', '.join(names)})" if names else ""
        )
        limit = f"; each cell at most {program.cell_timeout:g} s" if program.cell_timeout else ""
        return f"the notebook {program.path}, {given}, run by nbclient{limit}"
    if isinstance(program, CellProgram):
        n = program.lines
        use = prepared.workspace_use
        how = "the cell runner" if use is not None and use.runs_program else "python -c"
        torchrun = " under torchrun" if program.j else ""
        return f"a cell of {n} line{'s' if n != 1 else ''}, run by {how}{torchrun}"
    first = prepared.app.roles[0]
    # TorchX's macros as the request has them: ``$${${rank0_env}:=localhost}`` is
    # ``${TORCHX_RANK0_HOST:=localhost}``; what is known only at submit (``${app_id}``,
    # ``${replica_id}``, ``${img_root}``) stays a macro
    args = [string.Template(a).safe_substitute(rank0_env=rank0_env) for a in first.args]
    command = " ".join(str(a) for a in redact([first.entrypoint, *args]))
    return command if len(command) <= 100 else command[:99] + "…"


def _role(role: Role, images: bool) -> str:
    res = role.resource
    n = role.num_replicas
    parts = [f"{role.name}: {n} replica{'s' if n != 1 else ''}"]
    if images and role.image:
        parts.append(f"image {role.image}")
    need = [f"{res.cpu:g} cpu", f"{res.memMB} MB"]
    if res.gpu:
        need.append(f"{res.gpu} gpu")
    parts.append(", ".join(need))
    return " · ".join(parts)


def _ships(preview: str | None, workspace: str | None) -> str:
    if not workspace:
        return "nothing (no workspace: the program travels in the request)"
    if not preview:
        return f"runs in {workspace} (nothing is copied)"
    first = preview.splitlines()[0]
    left = _LEFT_OUT.search(preview)
    return first + (f"; {left.group(1)} left out" if left else "")


def _secret_lines(preview: str | None) -> list[str]:
    """The re-included secrets, always in the summary: nobody should miss them."""
    if not preview or _SECRETS_HEAD not in preview:
        return []
    block = preview[preview.index(_SECRETS_HEAD) :].splitlines()
    out = [block[0]]
    for line in block[1:]:
        if not line.startswith("  "):
            break
        out.append(line)
    return out


def _size(text: str) -> str:
    n = len(text.encode())
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KB"


__all__ = ["DryRunSummary", "summarize"]
