"""A backend of the real kind whose capacity can be reclaimed as Slurm's PreemptMode=CANCEL
reclaims it: real local_cwd jobs, but a preemption ends the native job for good (its record, a
``reclaimed`` file, says so, as sacct's PREEMPTED does), and the backend submits a job again
from what it keeps of it (``request.json``) under a new native id."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import replace
from typing import Any

from torchx_nb.schedulers.abilities import Preemptible, SubmitsAgain
from torchx_nb.schedulers.local_cwd import LocalCwdScheduler
from torchx_nb.schedulers.local_cwd_request import PopenRequest, format_request
from torchx_nb.specs.api import AppDryRunInfo, AppState
from torchx_nb.specs.preemption import Preemption
from torchx_nb.specs.responses import DescribeAppResponse

WHY = "spot capacity reclaimed"


class ReclaimingScheduler(LocalCwdScheduler, Preemptible, SubmitsAgain):
    preempt_grace = 2.0

    @property  # type: ignore[override]
    def end_hook(self) -> list[str] | None:
        """No end-of-job watcher: the CLI it would run does not know this test backend."""
        return None

    @end_hook.setter
    def end_hook(self, value: list[str] | None) -> None:
        pass

    def preempt(self, app_id: str, grace: float) -> None:
        (self._app_dir(app_id) / "reclaimed").write_text(json.dumps({"at": time.time()}))
        self._cancel_existing(app_id)  # SIGTERM, the grace, the kill: the job ends

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        desc = super().describe(app_id)
        mark = self._app_dir(app_id) / "reclaimed"
        if desc is None or not mark.exists():
            return desc
        said = Preemption(json.loads(mark.read_text())["at"], WHY)
        if desc.state == AppState.CANCELLED:  # the backend's record: preempted, not cancelled
            return replace(desc, state=AppState.FAILED, preemptions=[said], ended_preempted=True)
        return replace(desc, preemptions=[said])

    def submit_again(self, app_id: str) -> str:
        text = (self._app_dir(app_id) / "request.json").read_text()
        new_id = f"{app_id.rsplit('-', 1)[0]}-{secrets.token_hex(4)}"
        request: dict[str, Any] = json.loads(text.replace(app_id, new_id))
        return self.schedule(AppDryRunInfo(PopenRequest(**request), format_request))


def create_scheduler(session_name: str, **kwargs: Any) -> ReclaimingScheduler:
    return ReclaimingScheduler(session_name, **kwargs)
