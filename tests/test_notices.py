"""Job-end notices: the payload (masked, Slack-compatible), the URL masked wherever shown,
one sender per job end even with several watchers in several processes, retries, and one
warning line for a webhook that stays down. Real local_cwd jobs and a real HTTP receiver."""

from __future__ import annotations

import multiprocessing
import time
import warnings
from pathlib import Path

import pytest

from tests.conftest import cli
from tests.infra.webhook import webhook_receiver
from torchx_nb import notices
from torchx_nb.components.cell import cell
from torchx_nb.jobstore import JobStore
from torchx_nb.runner import get_runner
from torchx_nb.specs.failure import FailureCard


def test_the_payload_is_masked_and_reads_in_slack() -> None:
    card = FailureCard(
        "cell",
        0,
        1,
        exception="ValueError: boom",
        last_lines=["HF_TOKEN=hf_abcdefghijklmnopqrstuvwx123"],
    )
    body = notices.payload("local_cwd://torchx/train-1", "train", "FAILED", 83.2, [card])
    assert body["text"].startswith(
        "train (local_cwd://torchx/train-1) FAILED after 1:23: cell/0 raised ValueError: boom (exit code 1)"
    )
    assert "hf_abcdefghijklmnopqrstuvwx123" not in str(body)
    assert body["failure"]["headline"] == "cell/0 raised ValueError: boom (exit code 1)"
    assert (body["handle"], body["state"], body["duration"]) == (
        "local_cwd://torchx/train-1",
        "FAILED",
        83.2,
    )
    ok = notices.payload("h", "n", "SUCCEEDED", 2, [])
    assert ok["failure"] is None and ok["text"] == "n (h) SUCCEEDED after 0:02"


def test_the_url_is_masked_where_shown_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (
        notices.shown_url("https://hooks.slack.com/services/T0/B0/XYZ")
        == "https://hooks.slack.com/****"
    )
    assert notices.shown_url("https://user:pw@example.test/x") == "https://example.test/****"
    monkeypatch.setenv(notices.NOTIFY_ENV, "ftp://example.test/x")
    with pytest.raises(
        notices.NotifyError, match=r"^the notice URL 'ftp://example.test/\*\*\*\*' is not"
    ):
        notices.notify_url()
    monkeypatch.delenv(notices.NOTIFY_ENV)
    assert notices.notify_url() is None


@pytest.mark.parametrize(
    "url", ["http://bot:s3cr/et@127.0.0.1:9/x", "http://bot:s3cr?et@127.0.0.1:9/x"]
)
def test_a_url_whose_password_urllib3_cannot_read_is_one_line_before_the_job(
    isolated: Path, url: str
) -> None:
    """A ``/`` or ``?`` left unescaped in the password cuts urllib3's host short
    (``'bot:s3cr' is not a valid host or port``): that text was the notice's error, kept in
    the job store and shown, holding the user and part of the password, and the job ran with
    a notice that could never be sent. Now the submit is one line naming the fix, masked,
    and nothing runs."""
    assert notices.shown_url(url) == "http://****/****"
    code, out, err = cli(
        "run", "-s", "local_cwd", "utils.sh", "true", env={notices.NOTIFY_ENV: url}
    )
    assert code != 0 and out == "", out
    assert err.strip() == (
        "torchx-nb: error: the notice URL 'http://****/****' has no host urllib3 can read: a /"
        " # or ? in its user or password must be percent-encoded (%2F %23 %3F); fix"
        " TORCHX_NB_NOTIFY_URL or [notify] url in .torchxconfig"
    ), err
    assert "s3cr" not in err
    assert JobStore(str(isolated.parent / "torchx-nb-data" / "jobs.sqlite")).list() == []


def _claim(path: str, handle: str, out: multiprocessing.Queue[bool]) -> None:
    out.put(JobStore(path).lease_notice(handle, f"p{multiprocessing.current_process().pid}", 60))


def test_one_claim_wins_across_processes(tmp_path: Path) -> None:
    from tests.test_jobstore import rec

    path = str(tmp_path / "jobs.db")
    JobStore(path).add(rec("local_cwd://torchx/x", state="SUCCEEDED"))
    assert JobStore(path).owe_notice("local_cwd://torchx/x", "id-1") is True
    out: multiprocessing.Queue[bool] = multiprocessing.Queue()
    procs = [
        multiprocessing.Process(target=_claim, args=(path, "local_cwd://torchx/x", out))
        for _ in range(6)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert sorted(out.get(timeout=5) for _ in procs) == [False] * 5 + [True]
    assert JobStore(path).lease_notice("local_cwd://torchx/x", "me", 60) is False
    JobStore(path).notice_sent("local_cwd://torchx/x")
    assert JobStore(path).owe_notice("local_cwd://torchx/x", "id-2") is False
    assert JobStore(path).notice("local_cwd://torchx/x")["id"] == "id-1"  # type: ignore[index]


def test_a_job_end_sends_one_notice_with_two_watchers(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel-side runner and a CLI ``watch`` both see the end; one notice goes out, with
    the failure card of a failed cell."""
    with webhook_receiver() as hook:
        monkeypatch.setenv(notices.NOTIFY_ENV, hook.url)
        with get_runner() as runner:
            handle = runner.run(
                cell(
                    source="print('step 1', flush=True)\nraise RuntimeError('diverged')", name="fit"
                ),
                "local_cwd",
                {},
                workspace=str(isolated),
            )
            code, _, err = cli("watch", "--no-log", handle)
            assert code == 1, err
            runner.wait(handle, wait_interval=0.1, timeout=30)
            notices.drain()
            time.sleep(0.5)
        (body,) = hook.bodies()
        assert body["state"] == "FAILED" and body["handle"] == handle and body["name"] == "fit"
        assert body["failure"]["headline"] == "cell/0 raised RuntimeError: diverged (exit code 1)"
        assert body["failure"]["last_lines"][0] == "step 1"
        assert "T0-SECRET-PATH" not in err


def test_a_webhook_that_stays_down_is_retried_then_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(notices, "TRIES", 3)
    monkeypatch.setattr(notices, "BACKOFF_S", 0.05)
    with webhook_receiver() as hook:
        hook.fail = True
        sender = notices.Notifier()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                sender.submit(hook.url, lambda: {"text": "x"})
            sender.drain(10)
        assert len(hook.posts) == 6  # 3 tries each
        said = [str(w.message) for w in caught]
        assert said == [
            f"the job-end notice to http://127.0.0.1:{hook.url.split(':')[2].split('/')[0]}/**** failed:"
            " the webhook answered HTTP 500"
        ], said
        hook.fail = False
        sender.submit(hook.url, lambda: {"text": "back"})
        sender.drain(10)
        assert hook.bodies()[-1] == {"text": "back"} and sender.sent == 1


def test_a_local_job_nobody_watches_still_gets_its_notice(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No kernel, server or CLI watches the job: local_cwd's supervisor runs the end hook
    (torchx-nb watch) and one notice goes out; without a notice configured no hook is left."""
    from torchx_nb.schedulers.local_cwd import LocalCwdScheduler

    with webhook_receiver() as hook:
        monkeypatch.setenv(notices.NOTIFY_ENV, hook.url)
        with get_runner() as runner:
            handle = runner.run(cell(source="1 / 0", name="alone"), "local_cwd", {}, str(isolated))
        deadline = time.monotonic() + 60
        while not hook.posts and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1)
        (body,) = hook.bodies()
        assert body["handle"] == handle and body["state"] == "FAILED"
        assert (
            body["failure"]["headline"]
            == "cell/0 raised ZeroDivisionError: division by zero (exit code 1)"
        )
        monkeypatch.delenv(notices.NOTIFY_ENV)
        with get_runner() as runner:
            quiet = runner.run(cell(source="2", name="quiet"), "local_cwd", {}, str(isolated))
            sched = runner.get_scheduler("local_cwd")
            assert isinstance(sched, LocalCwdScheduler) and sched.end_hook is None
            state_dir = sched._app_dir(quiet.rsplit("/", 1)[1])
            assert not (state_dir / "on_end.json").exists()


def test_a_302_is_not_followed_as_a_get_nor_counted_sent() -> None:
    """urllib re-sent a POST answered 302 as a GET without its body and counted it sent: now it
    is one warning naming the fix, nothing re-sent, and not counted."""
    with webhook_receiver() as hook:
        base = hook.url.rsplit("/hooks/", 1)[0]
        hook.answers["/moved"] = (302, "/hooks/T0-SECRET-PATH")
        sender = notices.Notifier()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sender.submit(f"{base}/moved", lambda: notices.payload("h", "n", "SUCCEEDED", 1, []))
            sender.drain(30)
        assert [(m, p) for m, p, _ in hook.requests] == [("POST", "/moved")]
        assert hook.posts == [] and sender.sent == 0
        (said,) = [str(w.message) for w in caught]
        assert said == (
            f"the job-end notice to {base}/**** failed: the webhook answered 302 (a redirect"
            " that would re-send the notice as a GET without its body): set the notice URL to"
            " the address it points to"
        )


def test_a_302_names_the_fix_where_the_command_ran(isolated: Path) -> None:
    """``run --wait`` with a webhook URL answering 302: the command's last line is the
    webhook's answer and the fix (it said only "will be sent when the webhook answers", as if
    waiting could help; the fix was in the job store alone)."""
    with webhook_receiver() as hook:
        base = hook.url.rsplit("/hooks/", 1)[0]
        hook.answers["/moved"] = (302, "/hooks/T0-SECRET-PATH")
        env = {notices.NOTIFY_ENV: f"{base}/moved"}
        code, out, err = cli("run", "--wait", "-s", "local_cwd", "utils.sh", "true", env=env)
        handle = out.strip().splitlines()[-1]
        assert code == 0, err
        assert err.splitlines()[-1] == (
            f"torchx-nb: the notice for {handle} is not delivered yet: the webhook answered 302"
            " (a redirect that would re-send the notice as a GET without its body): set the"
            " notice URL to the address it points to; it stays owed and the next torchx-nb"
            " command, kernel or server sends it"
        ), err
        assert hook.posts == []


def test_a_307_is_followed_keeping_the_post_and_its_id() -> None:
    with webhook_receiver() as hook:
        base = hook.url.rsplit("/hooks/", 1)[0]
        hook.answers["/temporary"] = (307, "/hooks/T0-SECRET-PATH")
        body = notices.payload("local_cwd://torchx/x-1", "x", "SUCCEEDED", 1, [])
        notices.post(f"{base}/temporary", body)
        assert [(m, p) for m, p, _ in hook.requests] == [
            ("POST", "/temporary"),
            ("POST", "/hooks/T0-SECRET-PATH"),
        ]
        assert hook.bodies() == [body]
        key = notices.notice_id("local_cwd://torchx/x-1")
        assert body["notice_id"] == key
        assert [h["idempotency-key"] for _, _, h in hook.requests] == [key, key]
        # stable: the same job end gets the same id in any process, another job another id
        assert notices.payload("local_cwd://torchx/x-1", "x", "FAILED", 9, [])["notice_id"] == key
        assert notices.notice_id("local_cwd://torchx/x-2") != key


def test_user_and_password_in_the_url_become_basic_auth_masked_where_shown() -> None:
    import base64

    with webhook_receiver() as hook:
        scheme, rest = hook.url.split("://", 1)
        url = f"{scheme}://bot:p%40ss%3Aword@{rest}"
        notices.post(url, {"text": "hi"})
        ((method, path, headers),) = hook.requests
        assert (method, path, hook.bodies()) == ("POST", "/hooks/T0-SECRET-PATH", [{"text": "hi"}])
        assert headers["authorization"] == "Basic " + base64.b64encode(b"bot:p@ss:word").decode()
        assert notices.shown_url(url) == f"{scheme}://{rest.split('/')[0]}/****"


def test_a_307_to_another_origin_does_not_carry_the_password() -> None:
    """A 307 to the same host on another port (another service: the origin is scheme, host and
    port, as browsers and requests take it) gets the POST without the ``user:pass``; it was
    sent there, since only the host name was compared."""
    with webhook_receiver() as hook, webhook_receiver() as other:
        scheme, rest = hook.url.split("://", 1)
        hook.answers["/hooks/T0-SECRET-PATH"] = (307, other.url)
        notices.post(f"{scheme}://bot:secret@{rest}", {"text": "hi"})
        assert [p for _, p, _ in hook.requests] == ["/hooks/T0-SECRET-PATH"]
        assert "authorization" in hook.requests[0][2]
        ((method, _, headers),) = other.requests
        assert method == "POST" and other.bodies() == [{"text": "hi"}]
        assert "authorization" not in headers, headers


def test_retry_after_on_a_503_is_honoured() -> None:
    """A webhook answering 503 with ``Retry-After: 2`` is asked again no sooner than 2 s later
    (the retry policy alone would retry at once)."""
    with webhook_receiver() as hook:
        hook.fail, hook.fail_status, hook.retry_after = True, 503, "2"
        sender = notices.Notifier()
        sender.submit(hook.url, lambda: {"text": "x"})
        deadline = time.monotonic() + 10
        while not hook.posts and time.monotonic() < deadline:
            time.sleep(0.01)
        hook.fail = False
        sender.drain(20)
        (first, _, _), (second, _, body) = hook.posts
        assert body == {"text": "x"} and sender.sent == 1
        assert second - first >= 1.9, second - first


def test_a_retry_after_that_is_not_a_time_is_the_webhooks_answer() -> None:
    """``Retry-After: soon`` on a 503: the notice's error is the webhook's answer (it was
    urllib3's ``InvalidHeader: Invalid Retry-After header: soon (set TORCHX_NB_DEBUG=1 …)``),
    and it is retried by the backoff alone."""
    with webhook_receiver() as hook:
        hook.fail, hook.fail_status, hook.retry_after = True, 503, "soon"
        with pytest.raises(notices.WebhookAnswer) as got:
            notices.post(hook.url, {"text": "x"})
    assert str(got.value) == "the webhook answered HTTP 503"
    assert got.value.retry_after is None


def test_a_retry_after_of_six_hours_is_the_answer_not_a_sleep() -> None:
    """``Retry-After: 21600`` on a 503 is over the shared 30 s cap (http_retry): the notice is
    not slept on for six hours (its heartbeat would keep the lease all that time); the answer
    is given at once, as one warning naming the wait asked for."""
    with webhook_receiver() as hook:
        hook.fail, hook.fail_status, hook.retry_after = True, 503, "21600"
        sender = notices.Notifier()
        port = hook.url.split(":")[2].split("/")[0]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.monotonic()
            sender.submit(hook.url, lambda: {"text": "x"})
            sender.drain(20)
            took = time.monotonic() - start
        assert took < 15, took
        assert len(hook.posts) == 1 and sender.sent == 0
        assert [str(w.message) for w in caught] == [
            f"the job-end notice to http://127.0.0.1:{port}/**** failed: the webhook answered"
            " HTTP 503 and asked for a wait of 21600 s (a notice waits at most 30 s)"
        ]


def test_a_webhook_down_at_the_end_gets_the_notice_from_the_next_status(isolated: Path) -> None:
    """The webhook answers 500 when ``run --wait`` sees the end: the command exits at most
    ~2 s later saying the notice is owed; its sender process tries it with backoff and gives
    it back, still owed, with the last error; the next ``status``, once the webhook is back,
    delivers it exactly once."""
    from tests.conftest import wait_for
    from torchx_nb.phases import fmt_duration

    with webhook_receiver() as hook:
        hook.fail = True
        env = {notices.NOTIFY_ENV: hook.url}
        start = time.monotonic()
        code, out, err = cli("run", "--wait", "-s", "local_cwd", "utils.sh", "true", env=env)
        took = time.monotonic() - start
        handle = out.strip().splitlines()[-1]
        assert code == 0, err
        assert err.splitlines()[-1] == (
            f"torchx-nb: the notice for {handle} will be sent when the webhook answers"
        ), err
        assert took < 30, fmt_duration(took)

        def given_back() -> dict[str, object] | None:
            record = JobStore().notice(handle)
            return record if record and record["lease"] is None and record["tries"] else None

        record = wait_for(given_back, 90, interval=0.2)
        assert isinstance(record, dict)
        assert record["sent"] is None and record["error"] == "the webhook answered HTTP 500"
        assert hook.posts and all(b["handle"] == handle for b in hook.bodies())
        tries = record["tries"]
        code, out, err = cli("status", handle, env=env)  # still down: where the user looks
        assert code == 0, err
        assert out.splitlines()[-1] == (
            f"Notice: the job-end notice is not delivered yet after {tries} tries: the webhook"
            " answered HTTP 500; it stays owed and the next torchx-nb command, kernel or server"
            " sends it"
        ), out

        def given_back_again() -> bool:  # that status's sender tried it and gave it back too
            again = JobStore().notice(handle)
            return bool(again and again["lease"] is None and again["tries"] > tries)

        wait_for(given_back_again, 90, interval=0.2)
        tried = len(hook.posts)
        hook.fail = False
        code, out, err = cli("status", handle, env=env)
        assert code == 0, err
        wait_for(lambda: len(hook.posts) > tried, 30)
        delivered = [b for b in hook.bodies()[tried:]]
        assert [(b["handle"], b["state"]) for b in delivered] == [(handle, "SUCCEEDED")]
        assert delivered[0]["notice_id"] == record["id"] == notices.notice_id(handle)
        wait_for(lambda: JobStore().notice(handle)["sent"], 30)  # type: ignore[index]
        code, out, err = cli("list", env=env)  # acknowledged: no other delivery
        time.sleep(1)
        assert len(hook.posts) == tried + 1


def test_a_slow_webhook_is_answered_once_though_the_command_exits(isolated: Path) -> None:
    """A webhook taking 12 s to answer: ``run --wait`` exits ~2 s after the end (saying the
    notice is owed), its sender process waits for the answer, so the notice is acknowledged
    (recorded sent) with one POST — the command did not abandon it mid-POST for the next
    command to send again, nor did the sender give up on the answer after 10 s (urllib3's
    total timeout was 10 s: such a webhook got the notice 6 times, every one answered 200,
    and it stayed owed for the next command to send 6 times more) — and later commands make
    no other delivery."""
    from tests.conftest import wait_for

    with webhook_receiver() as hook:
        hook.delay = 12.0
        env = {notices.NOTIFY_ENV: hook.url}
        start = time.monotonic()
        code, out, err = cli("run", "--wait", "-s", "local_cwd", "utils.sh", "true", env=env)
        took = time.monotonic() - start
        handle = out.strip().splitlines()[-1]
        assert code == 0, err
        assert err.splitlines()[-1].endswith("will be sent when the webhook answers"), err
        assert took < 30, took
        sent = wait_for(lambda: JobStore().notice(handle)["sent"], 60, interval=0.2)  # type: ignore[index]
        assert sent
        for command in ("status", "list"):
            code, _, err = cli(command, *([handle] if command == "status" else []), env=env)
            assert code == 0, err
        time.sleep(1)
        assert hook.keys() == [notices.notice_id(handle)], hook.keys()


def test_a_ten_trial_sweep_with_a_slow_webhook_gets_ten_notices_once_each(
    isolated: Path,
) -> None:
    """The issue's sweep: 10 trials, a healthy webhook taking 5 s per POST. ``sweep --wait``
    exits soon after the last end; every trial's notice is delivered and acknowledged, each
    by one POST (10 ids, no repeat) — a few at once, so well within the 50 s one at a time
    would take."""
    from tests.conftest import wait_for

    with webhook_receiver() as hook:
        hook.delay = 5.0
        env = {notices.NOTIFY_ENV: hook.url}
        code, out, err = cli(
            "sweep", "--wait", "-s", "local_cwd", "-p", "n=0,1,2,3,4,5,6,7,8,9", "utils.sh", "--", "true",
            env=env, timeout=300,
        )  # fmt: skip
        assert code == 0, err
        handles = [w for w in out.split() if w.startswith("local_cwd://")][:10]
        assert len(set(handles)) == 10, out
        ended = time.monotonic()
        store = JobStore()
        wait_for(lambda: all(store.notice(h)["sent"] for h in handles), 120, interval=0.2)  # type: ignore[index]
        took = time.monotonic() - ended
        code, _, err = cli("list", env=env)
        assert code == 0, err
        time.sleep(1)
        assert sorted(hook.keys()) == sorted(notices.notice_id(h) for h in handles), hook.keys()
        assert {b["handle"] for b in hook.bodies()} == set(handles)
    assert took < 40, took


def test_a_down_webhooks_error_kept_in_the_store_names_no_traceback(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A webhook nobody listens at (connection refused): the error kept with the owed notice,
    which ``torchx-nb status`` and the submitting cell show later, is urllib3's one line —
    it ended with '(set TORCHX_NB_DEBUG=1 to see the traceback)', a traceback that no later
    command has to show."""
    from tests.infra.dockerd import free_port

    monkeypatch.setattr(notices, "TRIES", 2)
    monkeypatch.setattr(notices, "BACKOFF_S", 0.05)
    from tests.conftest import stored

    store = JobStore()
    handle = "local_cwd://torchx/down-1"
    store.add(stored(handle, "local_cwd", "down", "FAILED", 5))
    assert store.owe_notice(handle, notices.notice_id(handle))
    lines: list[str] = []
    sender = notices.Notifier()
    sender.listen(handle, lines.append)
    url = f"http://127.0.0.1:{free_port()}/hook/T0-SECRET"
    sender.submit(url, lambda: {"text": "x"}, notices.Owed(store, handle))
    sender.drain(30)
    record = store.notice(handle)
    assert record is not None and record["sent"] is None and record["tries"] == 2
    assert record["error"].startswith("NewConnectionError: "), record["error"]
    assert "Connection refused" in record["error"] and "TORCHX_NB_DEBUG" not in record["error"]
    (line,) = lines
    assert "TORCHX_NB_DEBUG" not in line and "T0-SECRET" not in line, line


def test_one_notice_at_the_real_end_across_a_resubmission(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job preempted once (its native job ended with the preemption, as under Slurm's
    PreemptMode=CANCEL) and submitted again: no notice when the first native job ends, one
    when the job really ends, saying SUCCEEDED."""
    import sys

    from tests.conftest import wait_for
    from tests.runner.spot_backend import create_scheduler
    from torchx_nb import specs
    from torchx_nb.runner import Runner

    ck = isolated / "ck"
    program = f"import os,sys,time\nif os.path.exists({str(ck)!r}): sys.exit(0)\n"
    program += f"open({str(ck)!r}, 'w').close(); time.sleep(120)\n"
    role = specs.Role("train", "", entrypoint=sys.executable, args=["-c", program])
    with webhook_receiver() as hook:
        monkeypatch.setenv(notices.NOTIFY_ENV, hook.url)
        with Runner("torchx", {"spotty": create_scheduler}) as runner:
            handle = runner.run(specs.AppDef("train", [role]), "spotty")
            wait_for(lambda: ck.exists(), timeout=60)
            wait_for(lambda: runner.status(handle).state.name == "RUNNING", timeout=60)  # type: ignore[union-attr]
            runner.preempt(handle)
            status = runner.wait(handle, wait_interval=0.1, timeout=60)
            assert status is not None and status.state.name == "SUCCEEDED"
            notices.drain()
            time.sleep(0.5)
            rec = runner.jobstore.get(handle)
        assert rec is not None and (rec.attempt, rec.preemptions) == (2, 1)
        (body,) = hook.bodies()
        assert (body["handle"], body["state"]) == (handle, "SUCCEEDED")
