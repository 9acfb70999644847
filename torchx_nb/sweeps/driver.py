"""The driver thread of a sweep that goes one job per trial: it submits the next trial as a
slot frees up (``max_parallel``) and with ``fail_fast`` cancels the rest when one fails."""

from __future__ import annotations

import threading
import time
from typing import Any

from torchx_nb.errors import one_line
from torchx_nb.runner import RunRequest
from torchx_nb.specs.api import AppState, is_terminal
from torchx_nb.sweeps.handle import Sweep


class Driver(threading.Thread):
    """Submits the trials still waiting as slots free up (``max_parallel``), and with
    ``fail_fast`` cancels the rest when one fails."""

    def __init__(
        self,
        sweep: Sweep,
        pending: list[tuple[int, RunRequest]],
        max_parallel: int | None,
        fail_fast: bool,
        submit: Any,
    ) -> None:
        super().__init__(daemon=True, name=f"torchx-nb-{sweep.id}")
        self.sweep = sweep
        self.pending = pending
        self.max_parallel = max_parallel
        self.fail_fast = fail_fast
        self.submit = submit

    def run(self) -> None:
        sweep = self.sweep
        delay = 0.1
        try:
            while not sweep.stopped:
                statuses = sweep.statuses()
                if self.fail_fast and any(s and s.state == AppState.FAILED for s in statuses):
                    sweep.cancel()
                    return
                running = sum(
                    1
                    for h, s in zip(sweep.handles, statuses, strict=True)
                    if h and (s is None or not is_terminal(s.state))
                )
                if not self.pending and (not self.fail_fast or running == 0):
                    return
                free = (self.max_parallel or len(self.pending)) - running
                while free > 0 and self.pending and not sweep.stopped:
                    with sweep._submitting:
                        if sweep.stopped:
                            break
                        i, request = self.pending.pop(0)
                        try:
                            sweep._set_handle(i, self.submit(i, request))
                        except Exception as e:
                            sweep.error = (
                                f"trial {i} could not be submitted: {one_line(e)}; the trials"
                                " before it run on, the rest were not submitted"
                            )
                            sweep.stopped = True
                            return
                    free -= 1
                    delay = 0.1
                time.sleep(delay)
                delay = min(delay * 1.5, 2.0 if sweep.runner.is_local(sweep.scheduler) else 5.0)
        except Exception as e:
            sweep.error = one_line(e)
            sweep.stopped = True
