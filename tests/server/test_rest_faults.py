"""The REST API under what a real deployment meets, over HTTP against a real Jupyter server: a
store written by another process with a clock an hour ahead, a store locked for 45 s while a
job ends, a store moved away, a name in another alphabet, paging while jobs are submitted,
and every way a cancel can fail (ended, forgotten, unknown scheduler, Slurm unreachable, the
kubernetes client missing). Every answer is checked against the OpenAPI document."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import stored, wait_for
from tests.infra.lab import Lab, jupyter_lab
from tests.server.api_client import API, conforms, enc, get, request, sh, sse
from torchx_nb.jobstore import JobRecord, JobStore
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow


def listed_state(lab: Lab, name: str) -> str | None:
    jobs = get(lab, f"{API}/jobs?q={urllib.parse.quote(name)}")["jobs"]
    return jobs[0]["state"] if jobs else None


def record(handle: str, name: str, state: str, when: float, **extra: Any) -> JobRecord:
    """A job as another process would have left it in the store, submitted at ``when``."""
    rec = stored(handle, handle.split("://", 1)[0], name, state, age=0)
    ended = when if rec.is_terminal else None
    return dataclasses.replace(rec, submitted=when, updated=when, ended=ended, **extra)


def follow_changes(lab: Lab, position: str, handle: str, state: str, timeout: float) -> set[str]:
    """The states the change feed reports for ``handle`` after ``position``, read as a
    resuming client reads them (``Last-Event-ID``), until ``state`` shows or time is up."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while state not in seen and time.monotonic() < deadline:
        _, _, body = request(lab, "GET", f"{API}/events?once=1", {"Last-Event-ID": position})
        events = sse(body.decode())
        assert events and events[0][0] != "reset", events[:3]
        seen |= {d["state"] for k, d in events if k == "job" and d["handle"] == handle}
        position = next(v for k, v in reversed(events) if k == "id")
        time.sleep(0.2)
    return seen


def settled_position(lab: Lab, position: str, expect_reset: bool = False) -> str:
    """Where a client that obeys ``reset`` (it reloads one page) resumes from: the stream is
    read from ``position`` until it says nothing new; a reset is expected when asked."""
    reset = False
    for _ in range(20):
        _, _, body = request(lab, "GET", f"{API}/events?once=1", {"Last-Event-ID": position})
        events = sse(body.decode())
        reset |= any(kind == "reset" for kind, _ in events)
        new = next(v for k, v in reversed(events) if k == "id")
        if new == position and (reset or not expect_reset):
            return position
        position = new
        time.sleep(0.2)
    assert reset or not expect_reset, "the stream never said reset for another store"
    return position


def test_a_job_dated_in_the_future_does_not_freeze_the_stream(lab: Lab, store: Path) -> None:
    """Another process, its clock an hour ahead, writes a job; later changes still reach the
    event stream (it follows the store's change counter, not times), also after that job is
    deleted."""
    code = (
        "import time\n"
        "from torchx_nb.jobstore import JobStore, JobRecord\n"
        "t = time.time() + 3600\n"
        "JobStore().add(JobRecord('local_cwd://torchx/from-the-future', 'local_cwd', 'torchx',"
        " 'from-the-future', 'from-the-future', '', t, 'SUCCEEDED', t, ended=t))\n"
    )
    position = get(lab, f"{API}/jobs?per_page=1")["event_id"]
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    future = "local_cwd://torchx/from-the-future"
    assert "SUCCEEDED" in follow_changes(lab, position, future, "SUCCEEDED", 30)
    position = get(lab, f"{API}/jobs?per_page=1")["event_id"]
    with get_runner() as runner:
        handle = runner.run(sh("after-the-future", "true"), "local_cwd", {})
    assert "SUCCEEDED" in follow_changes(lab, position, handle, "SUCCEEDED", 30)

    JobStore().delete(future)
    position = get(lab, f"{API}/jobs?per_page=1")["event_id"]
    with get_runner() as runner:
        handle = runner.run(sh("after-it-went", "true"), "local_cwd", {})
    assert "SUCCEEDED" in follow_changes(lab, position, handle, "SUCCEEDED", 30)


def test_a_jobs_end_is_recorded_after_the_store_was_locked_for_45_s(lab: Lab, store: Path) -> None:
    """Another process holds the store's write lock for 45 s while a job ends: the server's
    write gives up after 30 s, and a later poll writes the end once the lock is gone."""
    with get_runner() as runner:
        handle = runner.run(sh("locked-out", "sleep 3"), "local_cwd", {})
    wait_for(lambda: listed_state(lab, "locked-out") == "RUNNING", 30)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time\n"
            "db = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "db.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "time.sleep(45)\n"
            "db.execute('COMMIT')\n",
            str(store / "jobs.sqlite"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        locked_at = time.monotonic()
        assert listed_state(lab, "locked-out") == "RUNNING"  # reads go on under the lock
        holder.wait(timeout=60)
    finally:
        holder.kill()
    assert time.monotonic() - locked_at > 40
    wait_for(lambda: listed_state(lab, "locked-out") == "SUCCEEDED", 45)
    detail = get(lab, f"{API}/jobs/{enc(handle)}")
    assert detail["state"] == "SUCCEEDED"


def test_a_store_moved_away_is_made_again_private_and_followed(lab: Lab, store: Path) -> None:
    """The store's file is moved aside while the server runs: the next call makes a new store
    (schema, mode 0600) instead of failing, and new jobs show in pages and in the stream."""
    path = store / "jobs.sqlite"
    files = [path.with_name(path.name + sfx) for sfx in ("", "-wal", "-shm")]
    with get_runner() as runner:
        runner.run(sh("before-the-move", "true"), "local_cwd", {})
    wait_for(lambda: listed_state(lab, "before-the-move") == "SUCCEEDED", 30)
    position = get(lab, f"{API}/jobs?per_page=1")["event_id"]
    for f in files:
        if f.exists():
            f.rename(f.with_name(f.name + ".aside"))
    try:
        page = get(lab, f"{API}/jobs")
        assert page["total"] == 0 and page["jobs"] == [], page
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with get_runner() as runner:
            runner.run(sh("after-the-move", "true"), "local_cwd", {})
        wait_for(lambda: listed_state(lab, "after-the-move") == "SUCCEEDED", 30)
        # a store made anew is a reset for a client of the old one (it reloads one page) ...
        position = settled_position(lab, position, expect_reset=True)
        # ... and the new store's later changes reach the stream from there
        with get_runner() as runner:
            handle = runner.run(sh("after-the-reset", "true"), "local_cwd", {})
        assert "SUCCEEDED" in follow_changes(lab, position, handle, "SUCCEEDED", 30)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        for f in files:
            aside = f.with_name(f.name + ".aside")
            f.unlink(missing_ok=True)
            if aside.exists():
                aside.rename(f)


def test_search_folds_case_in_every_alphabet_and_the_stream_says_what_matches(
    lab: Lab, store: Path
) -> None:
    store_ = JobStore()
    now = time.time()
    umlaut = record(
        "local_cwd://torchx/umlaut-1",
        "Überprüfung-Ärger",
        "SUCCEEDED",
        now - 5,
        notebook="/home/u/Étude.ipynb",
    )
    store_.add(umlaut)
    try:
        for q in ("überpr", "ÜBERPR", "ärger", "Étude", "étude", "berpr"):
            found = get(lab, f"{API}/jobs?q={urllib.parse.quote(q)}")["jobs"]
            assert [j["handle"] for j in found] == [umlaut.handle], q
        assert get(lab, f"{API}/jobs?q={urllib.parse.quote('ärgerlich')}")["jobs"] == []

        # where a client resumes once the stream has taken in the store it reads now (a
        # store restored by an earlier test is a reset for the page's id)
        position = settled_position(lab, get(lab, f"{API}/jobs?per_page=1")["event_id"])
        late = record("local_cwd://torchx/umlaut-2", "Ärger-zwei", "FAILED", now)
        other = record("local_cwd://torchx/plain-2", "plain", "FAILED", now)
        store_.add(late)
        store_.add(other)
        matched: dict[str, bool] = {}
        deadline = time.monotonic() + 30
        while len(matched) < 2 and time.monotonic() < deadline:
            _, _, body = request(
                lab,
                "GET",
                f"{API}/events?once=1&q={urllib.parse.quote('ärger')}",
                {"Last-Event-ID": position},
            )
            events = sse(body.decode())
            for kind, data in events:
                if kind == "job" and data["handle"] in (late.handle, other.handle):
                    matched[data["handle"]] = data["match"]
            position = next(v for k, v in reversed(events) if k == "id")
        assert matched == {late.handle: True, other.handle: False}
    finally:
        for h in ("local_cwd://torchx/umlaut-1", "local_cwd://torchx/umlaut-2"):
            store_.delete(h)
        store_.delete("local_cwd://torchx/plain-2")


def test_paging_while_jobs_are_submitted_never_repeats_or_skips(lab: Lab, store: Path) -> None:
    """Walks of per_page=7 by ``next`` while 50 jobs are added: each walk shows every job that
    was there before it began exactly once, and no row twice."""
    store_ = JobStore()
    base = time.time() - 3600
    before = [
        record(f"local_cwd://torchx/walk-{i:03d}", "walk", "SUCCEEDED", base + i) for i in range(60)
    ]
    for rec in before:
        store_.add(rec)
    # two jobs with the same submitted time: the handle breaks the tie
    twin = record("local_cwd://torchx/walk-twin", "walk", "SUCCEEDED", base + 30)
    store_.add(twin)
    stop = threading.Event()

    def submit() -> None:
        for i in range(50):
            if stop.is_set():
                return
            store_.add(
                record(f"local_cwd://torchx/walk-new-{i:03d}", "walk", "SUCCEEDED", time.time())
            )
            time.sleep(0.02)

    adder = threading.Thread(target=submit)
    adder.start()
    walks = 0
    try:
        while adder.is_alive() or walks < 3:
            seen: list[str] = []
            page = get(lab, f"{API}/jobs?q=walk&per_page=7")
            while True:
                seen += [j["handle"] for j in page["jobs"]]
                if page["next"] is None:
                    break
                conforms(page, "/torchx-nb/api/jobs")
                page = get(
                    lab, f"{API}/jobs?q=walk&per_page=7&after={urllib.parse.quote(page['next'])}"
                )
            assert len(seen) == len(set(seen)), [h for h in seen if seen.count(h) > 1]
            assert {r.handle for r in before} | {twin.handle} <= set(seen)
            walks += 1
    finally:
        stop.set()
        adder.join()
        for rec in store_.page(text="walk", limit=500)[0]:
            store_.delete(rec.handle)
    status, _, body = request(lab, "GET", f"{API}/jobs?after=not-a-position")
    assert status == 400 and b"SUBMITTED:HANDLE" in body


def cancel(lab: Lab, handle: str) -> tuple[int, dict[str, Any]]:
    status, _, body = request(lab, "POST", f"{API}/jobs/{enc(handle)}/cancel")
    parsed = json.loads(body)
    conforms(parsed, "/torchx-nb/api/jobs/{handle}/cancel", "post", str(status))
    return status, parsed


def test_every_way_a_cancel_fails_has_its_status(lab: Lab, store: Path) -> None:
    """Ended: 409 and nothing done; forgotten by its scheduler: 404; a scheduler nobody has
    installed: 503; each with its one line, and listed in the document."""
    with get_runner() as runner:
        ended = runner.run(sh("ended-already", "true"), "local_cwd", {})
        runner.wait(ended, timeout=30)
    status, body = cancel(lab, ended)
    assert status == 409, body
    assert body["reason"] == f"{ended} has already ended (SUCCEEDED); there is nothing to cancel"

    store_ = JobStore()
    now = time.time()
    ghost = record("local_cwd://torchx/ghost-0042", "ghost", "RUNNING", now)
    alien = record("nosuchsched://torchx/x-1", "alien", "RUNNING", now)
    for rec in (ghost, alien):
        store_.add(rec)
    try:
        status, body = cancel(lab, ghost.handle)
        assert status == 404 and "the scheduler has no record of it" in body["reason"], body
        status, body = cancel(lab, alien.handle)
        assert status == 503 and "nosuchsched" in body["reason"], body
        status, body = cancel(lab, "local_cwd://torchx/never-submitted")
        assert status == 404 and body["reason"] == "no such job"
    finally:
        store_.delete(ghost.handle)
        store_.delete(alien.handle)
    assert "Traceback" not in lab.log_text()


def test_cancel_with_slurm_unreachable_or_kubernetes_missing_is_503(tmp_path: Path) -> None:
    """A server whose Slurm controller does not answer (the real Slurm client, a controller
    address nobody listens on) and whose Python lacks the kubernetes client."""
    conf = tmp_path / "slurm" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text(
        "ClusterName=unreachable\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=9\n"
        "AuthType=auth/none\nCredType=cred/none\n"
        "NodeName=n1 NodeHostname=localhost NodeAddr=127.0.0.1 CPUs=1\n"
        "PartitionName=debug Nodes=ALL Default=YES\n"
    )
    shadow = tmp_path / "shadow" / "kubernetes"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'kubernetes'\", name='kubernetes')\n"
    )
    data = tmp_path / "data"
    from shutil import which

    if which("squeue") is None:
        from tests.infra.fixtures import missing

        missing("Slurm's client commands (apt-get install slurm-client)")
    env = {
        "TORCHX_NB_DATA_DIR": str(data),
        "SLURM_CONF": str(conf),
        "PYTHONPATH": os.pathsep.join(
            [str(shadow.parent), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    old = os.environ.get("TORCHX_NB_DATA_DIR")
    os.environ["TORCHX_NB_DATA_DIR"] = str(data)
    try:
        store_ = JobStore()
        now = time.time()
        for rec in (
            record("slurm://torchx/4242", "slurm-job", "RUNNING", now),
            record("kubernetes://torchx/default:train-x1", "kube-job", "RUNNING", now),
        ):
            store_.add(rec)
    finally:
        if old is None:
            os.environ.pop("TORCHX_NB_DATA_DIR")
        else:
            os.environ["TORCHX_NB_DATA_DIR"] = old
    with jupyter_lab(tmp_path / "root", env=env) as server:
        status, body = cancel(server, "slurm://torchx/4242")
        assert status == 503, body
        assert body["reason"].startswith("scheduler unavailable: squeue: "), body
        assert (
            "the Slurm controller does not answer; check it with `scontrol ping`" in body["reason"]
        )
        status, body = cancel(server, "kubernetes://torchx/default:train-x1")
        assert status == 503, body
        assert body["reason"] == (
            "scheduler unavailable: kubernetes is not installed; install it with:"
            " pip install 'torchx_nb[kubernetes]'"
        )
        assert "Traceback" not in server.log_text()


def test_a_failed_jobs_detail_carries_its_failure_cards(
    lab: Lab, store: Path, tmp_path: Path
) -> None:
    from torchx_nb.components.cell import cell

    with get_runner() as runner:
        handle = runner.run(
            cell(
                source="print('token=ghp_' + 'a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8', flush=True)\n"
                "raise KeyError('missing')"
            ),
            "local_cwd",
            {},
            workspace=str(tmp_path),
        )
        runner.wait(handle, wait_interval=0.1, timeout=60)
    detail = get(lab, f"{API}/jobs/{enc(handle)}")
    conforms(detail, "/torchx-nb/api/jobs/{handle}")
    (card,) = detail["failures"]
    assert card["headline"] == "cell/0 raised KeyError: 'missing' (exit code 1)"
    assert (card["role"], card["replica"], card["exit_code"], card["oom"]) == ("cell", 0, 1, False)
    assert card["exception"] == "KeyError: 'missing'"
    assert card["last_lines"][-1] == "KeyError: 'missing'"
    assert "ghp_" not in json.dumps(detail)  # the last lines are masked
    with get_runner() as runner:
        ok = runner.run(sh("fine", "true"), "local_cwd", {})
        runner.wait(ok, wait_interval=0.1, timeout=60)
    assert get(lab, f"{API}/jobs/{enc(ok)}")["failures"] == []


def test_a_submission_whose_backend_or_registry_does_not_answer_is_503_not_400(
    tmp_path: Path,
) -> None:
    """POST /jobs against a server whose AWS endpoint and registry nobody listens on (real
    boto3 and the real registry client, connection refused): the dry run's role lookup and
    the build's push are outages, 503 with the error's own line, not a 400 telling the user
    their request is wrong (every dry-run failure was a 400); a request that is wrong stays
    a 400 naming the fix. Nothing is submitted either way."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from tests.infra.dockerd import free_port
    from tests.server.test_rest_notebook_jobs import post

    nobody = free_port()  # nothing listens there
    root = tmp_path / "root"
    root.mkdir()
    nbformat.write(new_notebook(cells=[new_code_cell("print(1)")]), root / "a.ipynb")
    env = {
        "TORCHX_NB_DATA_DIR": str(tmp_path / "data"),
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{nobody}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
    }
    with jupyter_lab(root, env=env) as server:
        base = {"notebook": "a.ipynb", "image": f"127.0.0.1:{nobody}/base:1"}
        status, answer = post(
            server,
            f"{API}/jobs",
            {
                **base,
                "scheduler": "aws_sagemaker",
                "cfg": {"instance_type": "ml.m5.large", "role": "R"},
            },
        )
        assert status == 503, answer
        assert answer["reason"] == (
            "cannot look up the IAM role 'R': cannot reach the AWS endpoint (Could not connect"
            f' to the endpoint URL: "http://127.0.0.1:{nobody}/"); check AWS_ENDPOINT_URL and'
            " the network"
        )
        conforms(answer, "/torchx-nb/api/jobs", "post", "503")
        status, answer = post(
            server, f"{API}/jobs", {**base, "scheduler": "aws_batch", "cfg": {"queue": "q"}}
        )
        assert status == 503, answer
        assert answer["reason"] == (
            f"registry 127.0.0.1:{nobody} is unreachable (http); check the host and port of"
            " image_repo"
        )
        status, answer = post(server, f"{API}/jobs", {**base, "scheduler": "aws_batch"})
        assert status == 400, answer
        assert answer["reason"].startswith("missing required option 'queue'"), answer
        assert get(server, f"{API}/jobs")["total"] == 0
        assert "Traceback" not in server.log_text()
