"""The detached process that runs one local_cwd app: ``python -I -S local_supervisor STATE_DIR``
(this folder, run by ``__main__``).

It starts every replica in a session of its own, copies each replica's stdout and stderr into
``stdout.log``, ``stderr.log`` and ``combined.log``, and records pids and exit codes in
``STATE_DIR/state.json`` (written atomically, mode 0600) so that any process can describe the
app later.

No process outlives its job:
- the supervisor is a child subreaper, so a replica's orphaned children stay its descendants;
- when every replica has exited, whatever is left of their sessions and of its descendants is
  killed (a background ``cmd &`` of a finished job does not live on);
- SIGTERM cancels: every process of the job gets SIGTERM, then SIGKILL after the grace period,
  and the final state is written only once none is left;
- a ``preempt`` marker (``torchx-nb preempt``) stops the replicas the same way (SIGTERM, SIGKILL
  after the marker's grace), records the attempt in ``state.json`` and runs them again: the
  next attempt, appending to the same logs;
- each replica's first process dies with the supervisor (``PR_SET_PDEATHSIG``); the rest of its
  session is killed by ``kill_orphans``, which ``describe`` and ``cancel`` run when they find
  the supervisor gone.

Processes are named by pid *and* start time, so a reused pid is never mistaken for ours.

Standard library only, and no import of torchx_nb: it starts in a few milliseconds. Its
modules import each other relatively, and ``__main__`` loads the folder as a package of its
own name, so the same files serve the job (run from the folder) and torchx_nb (imported):
``processes`` (pids and start times, what both sides use) and ``supervisor``."""

from __future__ import annotations

from .processes import is_same_process, kill_orphans, start_ticks

__all__ = ["is_same_process", "kill_orphans", "start_ticks"]
