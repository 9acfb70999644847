"""The sender a short-lived ``torchx-nb`` command hands its job-end notices to: a process of
its own (``python -m torchx_nb.notice_sender``) that sends every notice the job store's
outbox owes — each leased, its lease renewed while the POST is in flight, retried with
backoff — and exits once none is left that it has not tried. A command that exits after ~2 s
then never leaves a delivery half made: a slow webhook's answer is waited for, and the
notice is acknowledged once instead of being sent again by the next command."""

from __future__ import annotations

import sys

ROUND_S = 600.0  # at most this long for one round of deliveries (each is bounded far below)


def main() -> int:
    from torchx_nb import notices
    from torchx_nb.runner import get_runner

    with get_runner() as runner:
        _ = runner.jobstore  # opening the store sends what it owes: the first round
        tried = set(notices.notifier().owed)
        while True:
            notices.drain(ROUND_S)
            fresh = runner.send_owed_notices(frozenset(tried))  # owed meanwhile (another job's end)
            if not fresh:
                return 0
            tried.update(fresh)


if __name__ == "__main__":
    sys.exit(main())
