"""How each replica of an ended job ended, kept in the job store (its ``endings`` column) from
the last status its scheduler gave: once the scheduler keeps nothing of the job (AWS Batch
after its retention, a deleted Kubernetes Job, a removed container) its status and failure
cards are made from it, so they still say the exit code, signal and ending seen live."""

from __future__ import annotations

import json
from typing import Any

from torchx_nb.specs.api import AppState, ReplicaStatus, RoleStatus

MAX_REPLICAS = 1000  # a huge job keeps its first replicas' endings (a card shows 1 to 20)
_KEPT = ("exit_code", "signal", "oom", "ended", "ending", "next_step", "structured_error_msg")


def endings_json(roles: list[RoleStatus]) -> str | None:
    """The replicas of ``roles`` as JSON (what a failure card needs of each); None for none."""
    out: list[dict[str, Any]] = []
    for rs in roles:
        for rep in rs.replicas:
            if len(out) >= MAX_REPLICAS:
                break
            row: dict[str, Any] = {"role": rs.role, "id": rep.id, "state": rep.state.name}
            row.update({k: getattr(rep, k) for k in _KEPT if getattr(rep, k) not in (None, "")})
            out.append(row)
    return json.dumps(out) if out else None


def roles_from_endings(text: str | None) -> list[RoleStatus]:
    """The replicas kept by ``endings_json``; an empty list for none (or a broken value)."""
    try:
        rows = json.loads(text or "[]")
    except ValueError:
        return []
    roles: dict[str, list[ReplicaStatus]] = {}
    for row in rows if isinstance(rows, list) else []:
        try:
            role = str(row["role"])
            state = AppState[str(row["state"])]
            kept = {k: row[k] for k in _KEPT if k in row}
            roles.setdefault(role, []).append(
                ReplicaStatus(int(row["id"]), state, role, "", **kept)
            )
        except (KeyError, TypeError, ValueError):
            continue
    return [RoleStatus(role, reps) for role, reps in roles.items()]
