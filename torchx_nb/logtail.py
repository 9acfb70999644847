"""Following several replicas' logs at once, yielding every line on the caller's thread.

Readers run in daemon threads and hand lines over a queue, so the consumer (the CLI, or a kernel
that must not print from other threads) writes them itself."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from torchx_nb.schedulers.logs import TailStop
from torchx_nb.specs.log_line import Stream

if TYPE_CHECKING:
    from torchx_nb.runner import Runner

_DONE = object()


def replica_targets(
    runner: Runner, handle: str, role: str | None = None, replicas: list[int] | None = None
) -> list[tuple[str, int]]:
    """(role, replica) pairs of a job, optionally narrowed to one role and some replicas: from
    the AppDef for a job this runner submitted, else from the scheduler's describe."""
    from torchx_nb.specs.api import TorchxNbError, UnknownAppException

    status = runner.submitted_status(handle) or runner.status(handle)
    if status is None:
        raise UnknownAppException(handle)
    targets = [
        (rs.role, r.id)
        for rs in status.roles
        if not role or rs.role == role
        for r in rs.replicas
        if replicas is None or r.id in replicas
    ]
    if role and not targets:
        roles = ", ".join(rs.role for rs in status.roles)
        raise TorchxNbError(f"{handle} has no replica {role}/{replicas or ''} (roles: {roles})")
    return targets


def follow(
    runner: Runner,
    handle: str,
    targets: list[tuple[str, int]],
    regex: str | None = None,
    tail: bool = False,
    streams: Stream | None = None,
) -> Iterator[tuple[str, int, str]]:
    """(role, replica, line) from every target, masked (``redact``) as every shown line is;
    with ``tail`` until the job ends."""
    from torchx_nb.redact import redact_lines

    if len(targets) == 1:
        role, k = targets[0]
        read = runner.log_lines(handle, role, k, regex=regex, should_tail=tail, streams=streams)
        for line in redact_lines(read):
            yield role, k, line
        return
    lines: queue.Queue[object] = queue.Queue(maxsize=10000)

    def pump(role: str, k: int) -> None:
        try:
            read = runner.log_lines(handle, role, k, regex=regex, should_tail=tail, streams=streams)
            for line in redact_lines(read):
                lines.put((role, k, line))
        except Exception as e:
            lines.put((role, k, f"[torchx_nb: cannot read {role}/{k}: {e}]\n"))
        finally:
            lines.put(_DONE)

    for role, k in targets:
        threading.Thread(target=pump, args=(role, k), daemon=True).start()
    remaining = len(targets)
    while remaining:
        item = lines.get()
        if item is _DONE:
            remaining -= 1
            continue
        yield item  # type: ignore[misc]


__all__ = ["TailStop", "follow", "replica_targets"]
