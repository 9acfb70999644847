"""Noticing: the job-end notice — owed in the job store's outbox when a watcher sees a job
end, sent on the notifier's thread, and what a front end shows of one that is late."""

from __future__ import annotations

import contextlib
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from torchx_nb.runner.core import RunnerContext
from torchx_nb.specs.api import AppHandle, AppState, AppStatus, parse_app_handle
from torchx_nb.specs.failure import FailureCard

#: the failure cards of a job (``Runner.failure_cards``), for a failed job's notice
Cards = Callable[[AppHandle, AppStatus | None], list[FailureCard]]


class Noticing:
    """The job-end notices of the runner's jobs, over its shared context; ``cards`` gives a
    failed job's failure cards."""

    def __init__(self, ctx: RunnerContext, cards: Cards) -> None:
        self.ctx = ctx
        self._cards = cards

    def end_hook(self) -> list[str] | None:
        """What a backend's own end-of-job process runs (``RunsEndHook``), when a job-end
        notice is configured: ``torchx-nb watch`` of the job, which claims and sends it as any
        watcher does. None without a notice: no extra process at every job's end."""
        from torchx_nb.notices import notify_url

        try:
            if notify_url() is None:
                return None
        except Exception:
            return None
        return [sys.executable, "-m", "torchx_nb.cli", "watch", "--no-log"]

    def notice(self, app_handle: AppHandle, status: AppStatus | None) -> None:
        """The job-end notice, when one is configured: recorded as owed in the job store's
        outbox, then leased, built and sent on the notifier's thread, never this one's; it
        stays owed until the webhook acknowledges it, and any later process that opens the
        store sends it (``send_owed``)."""
        from torchx_nb.notices import Owed, notice_id, notifier, notify_url, payload

        try:
            url = notify_url()
            if url is None or not self.ctx.jobstore.owe_notice(app_handle, notice_id(app_handle)):
                return
        except Exception as e:
            warnings.warn(f"no job-end notice for {app_handle}: {e}", stacklevel=3)
            return

        def build() -> dict[str, Any]:
            rec = self.ctx.jobstore.get(app_handle)
            state = status.state.name if status is not None else (rec.state if rec else "")
            cards = self._cards(app_handle, status) if state == AppState.FAILED.name else []
            name = rec.name if rec else parse_app_handle(app_handle).app_id
            ended = (rec.ended if rec else None) or (status.ended if status else None)
            duration = (ended or time.time()) - rec.submitted if rec else None
            return payload(app_handle, name, state, duration, cards)

        owed = Owed(self.ctx.jobstore, app_handle)
        notifier().submit(url, build, owed, hand_off=self.ctx.hand_off_notices)

    def notice_line(self, app_handle: AppHandle) -> str | None:
        """One line on the job-end notice when it is owed after failed tries (a webhook that
        stays down); None when it was sent, is not owed, or nothing was tried yet."""
        try:
            record = self.ctx.jobstore.notice(app_handle)
        except Exception:
            return None
        if record is None or record["sent"] is not None or not record["tries"]:
            return None
        why = f": {record['error']}" if record["error"] else ""
        return (
            f"the job-end notice is not delivered yet after {record['tries']} tries{why}; it"
            " stays owed and the next torchx-nb command, kernel or server sends it"
        )

    def follow_notice(self, app_handle: AppHandle, on_line: Callable[[str], None]) -> None:
        """Call ``on_line(line)`` from the notifier's thread when the job-end notice of
        ``app_handle`` is given up on for now (a webhook that stays down): the front end
        showing the job puts that one line there, instead of a Python warning wherever."""
        from torchx_nb.notices import notifier, notify_url

        with contextlib.suppress(Exception):
            if notify_url() is not None:
                notifier().listen(app_handle, on_line)

    def send_owed(self, skip: frozenset[str] = frozenset()) -> list[str]:
        """Send the notices the outbox still owes and are free to take (a process that ended
        before the webhook answered left them), but those in ``skip``: any process that opens
        the job store does, once. Returns the handles it took up."""
        from torchx_nb.notices import notify_url

        try:
            if notify_url() is None:
                return []
            owed = [h for h in self.ctx.jobstore.owed_notices() if h not in skip]
        except Exception:
            return []
        for handle in owed:
            self.notice(handle, None)
        return owed
