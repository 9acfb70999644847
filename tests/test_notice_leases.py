"""The outbox's leases across processes, with a real HTTP receiver and real processes: a slow
webhook gets one delivery (the sender renews its lease while the POST is in flight, so no
other process sends it again), a sender killed mid-delivery leaves the notice owed and
another process delivers it once its lease has run out (the same ``Idempotency-Key``), and
one slow answer does not hold up the other notices (deliveries run a few at once). Leases
are shortened to seconds in the sender processes so the tests take seconds, not minutes."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

from tests.conftest import wait_for
from tests.infra.webhook import webhook_receiver
from tests.test_jobstore import rec
from torchx_nb import notices
from torchx_nb.jobstore import JobStore

LEASE = 1.5  # seconds a lease holds in these tests' senders (60 s in use)


def _body(handle: str) -> dict[str, Any]:
    return {"notice_id": notices.notice_id(handle), "handle": handle, "text": handle}


def _process_sends_owed(path: str, url: str, seconds: float) -> None:
    """A torchx_nb process that touches the store: it sends what the outbox owes and is free
    to take, again and again for ``seconds`` (as one CLI command after another would)."""
    notices.LEASE_S = LEASE
    notices.RENEW_S = LEASE / 4
    store = JobStore(path)
    sender = notices.Notifier()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for handle in store.owed_notices():
            sender.submit(url, lambda h=handle: _body(h), notices.Owed(store, handle))
        time.sleep(0.1)
    sender.drain(30)


def _owed_store(tmp_path: Path, *handles: str) -> str:
    path = str(tmp_path / "jobs.db")
    store = JobStore(path)
    for handle in handles:
        store.add(rec(handle, state="SUCCEEDED"))
        assert store.owe_notice(handle, notices.notice_id(handle))
    return path


def _start(path: str, url: str, seconds: float) -> multiprocessing.process.BaseProcess:
    proc = multiprocessing.get_context("spawn").Process(
        target=_process_sends_owed, args=(path, url, seconds)
    )
    proc.start()
    return proc


def test_a_slow_webhook_gets_one_delivery_while_other_processes_touch_the_store(
    tmp_path: Path,
) -> None:
    """The webhook takes four leases' time to answer; another process keeps looking for owed
    notices all that time. The sender's heartbeat keeps its lease, so one POST is made."""
    handle = "local_cwd://torchx/slow-1"
    path = _owed_store(tmp_path, handle)
    with webhook_receiver() as hook:
        hook.delay = 4 * LEASE
        first = _start(path, hook.url, 1.0)
        wait_for(lambda: len(hook.requests) == 1, 60, interval=0.05)
        other = _start(path, hook.url, 5 * LEASE)
        first.join(60)
        other.join(60)
        assert first.exitcode == 0 and other.exitcode == 0
        assert hook.keys() == [notices.notice_id(handle)], hook.keys()
    record = JobStore(path).notice(handle)
    assert record is not None and record["sent"] is not None and record["lease"] is None


def test_a_sender_killed_mid_delivery_leaves_it_to_another_process_once(tmp_path: Path) -> None:
    """The sending process is killed while the webhook holds its POST: the notice stays owed
    (its lease, no longer renewed, runs out), and the next process delivers it with the same
    ``Idempotency-Key``; once acknowledged, no process sends it again."""
    handle = "local_cwd://torchx/killed-1"
    path = _owed_store(tmp_path, handle)
    with webhook_receiver() as hook:
        hook.delay = 3 * LEASE
        doomed = _start(path, hook.url, 30.0)
        wait_for(lambda: len(hook.requests) == 1, 60, interval=0.05)
        assert doomed.pid is not None
        os.kill(doomed.pid, signal.SIGKILL)
        killed_at = time.time()
        doomed.join(30)
        hook.delay = 0.0
        record = JobStore(path).notice(handle)
        assert record is not None and record["sent"] is None  # not acknowledged: still owed
        later = _start(path, hook.url, 3 * LEASE)
        later.join(60)
        assert later.exitcode == 0
        record = JobStore(path).notice(handle)
        assert record is not None and record["sent"] is not None
        assert record["sent"] >= killed_at  # by the later process, after the kill
        # the cut-off POST and the one acknowledged, both with the notice's one key
        assert hook.keys() == [notices.notice_id(handle)] * 2, hook.keys()
        again = _start(path, hook.url, 2 * LEASE)
        again.join(60)
        assert len(hook.keys()) == 2  # acknowledged: no other delivery


def test_one_slow_answer_does_not_hold_up_the_other_notices(tmp_path: Path) -> None:
    """Ten notices owed, a webhook taking 2 s per POST: they go out a few at once, so the
    tenth is delivered in well under the 20 s one at a time would take, each exactly once."""
    handles = [f"local_cwd://torchx/trial-{i}" for i in range(10)]
    path = _owed_store(tmp_path, *handles)
    store = JobStore(path)
    with webhook_receiver() as hook:
        hook.delay = 2.0
        sender = notices.Notifier()
        start = time.monotonic()
        for handle in handles:
            sender.submit(hook.url, lambda h=handle: _body(h), notices.Owed(store, handle))
        sender.drain(60)
        took = time.monotonic() - start
        assert sorted(hook.keys()) == sorted(notices.notice_id(h) for h in handles)
    assert took < 12, took
    assert all(store.notice(h)["sent"] is not None for h in handles)  # type: ignore[index]
