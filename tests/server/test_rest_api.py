"""The REST API against a real jupyter_server (started as JupyterLab, with the extension enabled
by the config file the package installs): authentication, cross-site refusal, XSRF, filters
and pages, one job, logs as text, cancel, the event stream, and every response checked against
the shipped OpenAPI document."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.infra.lab import Lab, lab_missing
from tests.server.api_client import API, DOC, conforms, enc, get, request, sh, sse, validate
from torchx_nb.runner import get_runner

pytestmark = pytest.mark.slow


def test_every_endpoint_needs_jupyter_auth(lab: Lab) -> None:
    for path in ("/jobs", "/jobs/x", "/events?once=1", "/openapi.json"):
        status, _, _ = request(lab, "GET", API + path, token=False)
        assert status == 403, path
        status, _, _ = request(
            lab, "GET", API + path, token=False, headers={"Authorization": "token wrong"}
        )
        assert status == 403, path
    status, _, _ = request(
        lab, "POST", f"{API}/jobs/{enc('local_cwd://torchx/x')}/cancel", token=False
    )
    assert status == 403


def test_cross_site_and_cookie_without_xsrf_are_refused(lab: Lab, store: Path) -> None:
    """A browser session (the login cookie) must send the _xsrf token and come from the
    server's own origin; only then does a cancel go through."""
    import http.cookiejar

    with get_runner() as runner:
        handle = runner.run(sh("victim", "sleep 30"), "local_cwd", {})
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{lab.url}/lab?token={lab.token}", timeout=30).read()
    xsrf = next(c.value for c in jar if c.name == "_xsrf")
    url = f"{lab.url}{API}/jobs/{enc(handle)}/cancel"

    def post(headers: dict[str, str]) -> int:
        req = urllib.request.Request(url, data=b"", method="POST", headers=headers)
        try:
            return int(opener.open(req, timeout=30).status)
        except urllib.error.HTTPError as e:
            return e.code

    try:
        assert post({}) == 403  # no _xsrf
        # jupyter_server blocks a cross-origin API request with 404 ("Blocking Cross Origin")
        assert post({"X-XSRFToken": xsrf, "Origin": "http://evil.example"}) == 404
        assert "Blocking Cross Origin API request" in lab.log_text()
        with get_runner() as runner:
            assert not runner.status(handle).is_terminal()  # type: ignore[union-attr]
        assert post({"X-XSRFToken": xsrf, "Origin": lab.url}) == 202
    finally:
        with get_runner() as runner:
            runner.cancel(handle)


def test_jobs_filters_pages_detail_logs_and_cancel(lab: Lab, store: Path) -> None:
    with get_runner() as runner:
        done = [
            runner.run(
                sh(f"echo{i}", f"echo line {i}; echo '<script>alert(1)</script>'"), "local_cwd", {}
            )
            for i in range(3)
        ]
        for h in done:
            runner.wait(h, wait_interval=0.1, timeout=30)
        failed = runner.run(sh("broken", "echo nope >&2; exit 3"), "local_cwd", {})
        runner.wait(failed, wait_interval=0.1, timeout=30)
        sleeper = runner.run(sh("sleeper", "echo up; sleep 60"), "local_cwd", {})

    page = get(lab, f"{API}/jobs?per_page=2")
    conforms(page, "/torchx-nb/api/jobs")
    assert page["total"] >= 5 and len(page["jobs"]) == 2
    assert page["jobs"][0]["handle"] == sleeper  # newest first
    second = get(lab, f"{API}/jobs?per_page=2&page=2")
    assert {j["handle"] for j in second["jobs"]}.isdisjoint({j["handle"] for j in page["jobs"]})
    assert [j["handle"] for j in get(lab, f"{API}/jobs?state=FAILED")["jobs"]] == [failed]
    assert [j["handle"] for j in get(lab, f"{API}/jobs?q=echo1")["jobs"]] == [done[1]]
    assert get(lab, f"{API}/jobs?scheduler=aws_batch")["total"] == 0
    status, _, _ = request(lab, "GET", f"{API}/jobs?per_page=0")
    assert status == 400

    detail = get(lab, f"{API}/jobs/{enc(failed)}")
    conforms(detail, "/torchx-nb/api/jobs/{handle}")
    assert detail["state"] == "FAILED" and detail["roles"][0]["replicas"][0]["exit_code"] == 3
    assert request(lab, "GET", f"{API}/jobs/{enc('local_cwd://torchx/nope')}")[0] == 404
    assert request(lab, "GET", f"{API}/jobs/not-a-handle")[0] == 400

    logs = get(lab, f"{API}/jobs/{enc(done[0])}/logs")
    conforms(logs, "/torchx-nb/api/jobs/{handle}/logs")
    # log text is data in JSON, never markup
    assert logs["lines"] == ["line 0", "<script>alert(1)</script>"]
    assert get(lab, f"{API}/jobs/{enc(done[0])}/logs?tail=1")["lines"] == [
        "<script>alert(1)</script>"
    ]
    assert get(lab, f"{API}/jobs/{enc(done[0])}/logs?regex=line")["lines"] == ["line 0"]
    # the regex arrives as sent: tornado's get_argument would make this " ?0", stripped "?0"
    assert get(lab, f"{API}/jobs/{enc(done[0])}/logs?regex=%17?0")["lines"] == ["line 0"]
    assert get(lab, f"{API}/jobs/{enc(failed)}/logs?stream=stderr")["lines"] == ["nope"]
    assert request(lab, "GET", f"{API}/jobs/{enc(failed)}/logs?regex=(")[0] == 400
    status, _, body = request(lab, "GET", f"{API}/jobs/{enc(failed)}/logs?role=nosuch")
    assert status == 404 and "no role 'nosuch' (roles: main)" in body.decode(), body
    status, _, body = request(lab, "GET", f"{API}/jobs/{enc(failed)}/logs?role=main&replica=3")
    assert status == 404 and "role 'main' has replicas 0..0, not 3" in body.decode(), body

    status, _, body = request(lab, "POST", f"{API}/jobs/{enc(sleeper)}/cancel")
    assert status == 202, body
    conforms(json.loads(body), "/torchx-nb/api/jobs/{handle}/cancel", "post", "202")
    deadline = time.monotonic() + 20
    while get(lab, f"{API}/jobs/{enc(sleeper)}")["state"] != "CANCELLED":
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_event_stream_pushes_state_changes(lab: Lab, store: Path) -> None:
    status, headers, body = request(lab, "GET", f"{API}/events?once=1")
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    first = sse(body.decode())
    for kind, data in first:
        if kind == "job":
            validate(data, "Job")
    assert [k for k, _ in first][-2:] == ["counts", "id"]
    assert all(isinstance(n, int) for n in first[-2][1].values())

    conn = http.client.HTTPConnection(urllib.parse.urlsplit(lab.url).netloc, timeout=30)
    conn.request("GET", f"{API}/events", headers={"Authorization": f"token {lab.token}"})
    resp = conn.getresponse()
    assert resp.status == 200
    with get_runner() as runner:
        handle = runner.run(sh("evented", "sleep 1"), "local_cwd", {})
    seen: dict[str, float] = {}
    counts: list[dict[str, int]] = []
    start = time.monotonic()
    buffer = b""
    while "SUCCEEDED" not in seen and time.monotonic() - start < 30:
        buffer += resp.read1(65536)
        cut = buffer.rfind(b"\n\n")
        if cut < 0:
            continue
        text, buffer = buffer[: cut + 2].decode(), buffer[cut + 2 :]
        for kind, data in sse(text):
            if kind == "job" and data["handle"] == handle:
                seen.setdefault(data["state"], time.monotonic() - start)
            elif kind == "counts":
                counts.append(data)
    conn.close()
    assert "SUCCEEDED" in seen, seen
    assert "RUNNING" in seen or "SUBMITTED" in seen
    assert counts and counts[-1].get("SUCCEEDED", 0) >= 1


def test_event_stream_resumes_after_last_event_id(lab: Lab, store: Path) -> None:
    """A client that reconnects with the last id it saw (or a jobs page's ``event_id``) gets
    only what changed since; an id from another server or a restart is told to reset (and gets
    the jobs not yet ended); an id the stream never sent is a 400."""
    with get_runner() as runner:
        runner.run(sh("before-resume", "true"), "local_cwd", {})
        deadline = time.monotonic() + 30
        while get(lab, f"{API}/jobs?q=before-resume")["jobs"][0]["state"] != "SUCCEEDED":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        _, _, body = request(lab, "GET", f"{API}/events?once=1")  # the poller has caught up
        position = get(lab, f"{API}/jobs?per_page=1")["event_id"]
        handle = runner.run(sh("after-resume", "true"), "local_cwd", {})
    deadline = time.monotonic() + 30
    while True:
        _, _, body = request(lab, "GET", f"{API}/events?once=1", {"Last-Event-ID": position})
        events = sse(body.decode())
        states = {d["state"] for k, d in events if k == "job" and d["handle"] == handle}
        if "SUCCEEDED" in states or time.monotonic() > deadline:
            break
        position = next(v for k, v in reversed(events) if k == "id")
    assert "SUCCEEDED" in states
    jobs = {d["handle"] for k, d in events if k == "job"}
    assert jobs == {handle}, jobs
    with get_runner() as runner:
        running = runner.run(sh("still-running", "sleep 30"), "local_cwd", {})
    try:
        for stale in ("0123abcd.1", "", f"{position.split('.')[0]}.999999999"):
            _, _, body = request(lab, "GET", f"{API}/events?once=1", {"Last-Event-ID": stale})
            events = sse(body.decode())
            assert events[0] == ("reset", {}), events
            jobs = {d["handle"]: d["state"] for k, d in events if k == "job"}
            assert running in jobs and handle not in jobs, jobs
            assert all(state not in ("SUCCEEDED", "FAILED", "CANCELLED") for state in jobs.values())
        for bad in ("garbage", "EPOCH.\u00b2", "1" * 5000):
            status, _, body = request(
                lab, "GET", f"{API}/events?once=1&last_event_id={urllib.parse.quote(bad)}"
            )
            assert status == 400 and b"Last-Event-ID" in body, (bad, status, body)
        status, _, _ = request(lab, "GET", f"{API}/events?once=1", {"Last-Event-ID": "x.\u00b2"})
        assert status == 400
    finally:
        with get_runner() as runner:
            runner.cancel(running)


def test_schemathesis_fuzzes_every_operation_against_the_document(lab: Lab, store: Path) -> None:
    """Generated requests (valid and invalid parameters, odd handles) to every operation but
    the endless event stream: no 5xx, and every response matches the OpenAPI document."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis.checks import positive_data_acceptance

    from torchx_nb.user_regex import BadRegex, compile_regex

    def is_re2(text: str) -> bool:
        try:
            compile_regex(text)
        except BadRegex:
            return False
        return True

    # the document's "re2" format: regular expressions RE2 accepts
    schemathesis.openapi.format("re2", st.text(max_size=40).filter(is_re2))
    with get_runner() as runner:
        real = runner.run(sh("fuzzed", "true"), "local_cwd", {})
    schema = schemathesis.openapi.from_dict(DOC)
    auth = {"Authorization": f"token {lab.token}"}

    def fuzz_with(strategy: Any, excluded: list[Any]) -> Any:
        @settings(
            max_examples=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(case=strategy)
        def fuzz(case: Any) -> None:
            case.call_and_validate(base_url=lab.url, headers=auth, excluded_checks=excluded)

        return fuzz

    tried = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path.endswith("/events"):
            continue
        tried.append(operation.label)
        # a schema-valid submission still names a notebook that must exist under the root:
        # the filesystem, not the document, decides it (and a 400 says which field)
        excluded = (
            [positive_data_acceptance]
            if operation.label in ("POST /torchx-nb/api/jobs", "GET /torchx-nb/api/parameters")
            else []
        )
        # Handles hold slashes, which the generator keeps out of path parameters: a real one
        # and a missing one are given, and everything else is generated.
        fixed = (
            [{}]
            if "{handle}" not in operation.path
            else [
                {"handle": real},
                {"handle": "local_cwd://torchx/missing-<b>&x"},
            ]
        )
        for path_parameters in fixed:
            strategy = operation.as_strategy(path_parameters=path_parameters or None)
            fuzz_with(strategy, excluded)()
    assert len(tried) == 13, tried


def test_preempt_a_running_job_and_the_one_lines_when_it_cannot_be(
    lab: Lab, store: Path, tmp_path: Path
) -> None:
    """POST /jobs/H/preempt preempts a running local_cwd job (it runs again from its
    checkpoint, a file, under the same handle); a job that ended is 409 with its one line, a
    job not in the store 404."""
    ck = tmp_path / "ck"
    with get_runner() as runner:
        handle = runner.run(
            sh("spot", f"if [ -e {ck} ]; then echo resumed; else touch {ck}; sleep 60; fi"),
            "local_cwd",
            {},
        )
        deadline = time.monotonic() + 30
        while not (ck.exists() and get(lab, f"{API}/jobs/{enc(handle)}")["state"] == "RUNNING"):
            assert time.monotonic() < deadline
            time.sleep(0.2)
        status, _, body = request(lab, "POST", f"{API}/jobs/{enc(handle)}/preempt")
        assert status == 202, body
        conforms(json.loads(body), "/torchx-nb/api/jobs/{handle}/preempt", "post", "202")
        ended = runner.wait(handle, wait_interval=0.2, timeout=60)
        assert ended is not None and ended.state.name == "SUCCEEDED"
        rec = runner.jobstore.get(handle)
        assert rec is not None and rec.preemptions == 1
    row = get(lab, f"{API}/jobs/{enc(handle)}")
    conforms(row, "/torchx-nb/api/jobs/{handle}")
    assert (row["state"], row["attempt"], row["preemptions"]) == ("SUCCEEDED", 2, 1)
    status, _, body = request(lab, "POST", f"{API}/jobs/{enc(handle)}/preempt")
    assert status == 409 and json.loads(body)["reason"].endswith(
        "is SUCCEEDED, not running: only a running job can be preempted"
    ), body
    missing = enc("local_cwd://torchx/missing-1")
    assert request(lab, "POST", f"{API}/jobs/{missing}/preempt")[0] == 404


def test_openapi_document_is_served_and_is_openapi_3(lab: Lab) -> None:
    served = get(lab, f"{API}/openapi.json")
    assert served == DOC
    assert DOC["openapi"].startswith("3.")
    assert set(DOC["paths"]) == {
        "/torchx-nb/api/jobs",
        "/torchx-nb/api/jobs/{handle}",
        "/torchx-nb/api/jobs/{handle}/logs",
        "/torchx-nb/api/jobs/{handle}/cancel",
        "/torchx-nb/api/jobs/{handle}/preempt",
        "/torchx-nb/api/jobs/{handle}/result",
        "/torchx-nb/api/jobs/{handle}/outputs",
        "/torchx-nb/api/jobs/{handle}/outputs/{path}",
        "/torchx-nb/api/jobs/{handle}/notebook",
        "/torchx-nb/api/events",
        "/torchx-nb/api/schedulers",
        "/torchx-nb/api/parameters",
        "/torchx-nb/api/openapi.json",
    }


def test_the_wheel_enables_the_extension(tmp_path: Path) -> None:

    reason = lab_missing(panel=True)
    if reason:
        from tests.infra.fixtures import missing

        missing(reason)
    import subprocess
    import sys
    import zipfile

    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("torchx_nb-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "torchx_nb-0.1.0.data/data/etc/jupyter/jupyter_server_config.d/torchx_nb.json" in names
    assert "torchx_nb/server/openapi.json" in names
    # The JupyterLab extension comes prebuilt: installing the wheel needs no Node.
    lab = "torchx_nb-0.1.0.data/data/share/jupyter/labextensions/torchx-nb/"
    assert lab + "package.json" in names and lab + "install.json" in names
    built = json.loads(zipfile.ZipFile(wheel).read(lab + "package.json"))
    assert built["name"] == "torchx-nb" and built["jupyterlab"]["_build"]["load"].startswith(
        "static/remoteEntry."
    )
    assert lab + built["jupyterlab"]["_build"]["load"] in names


def test_a_hostile_regex_does_not_stall_the_server(lab: Lab, store: Path) -> None:
    """``(a+)+$`` on a line of a's ending in b takes a backtracking engine 2^n steps: the
    logs request and Jupyter's own /api/status both answer at once (RE2, off the loop)."""
    import concurrent.futures

    line = "a" * 40 + "b"
    with get_runner() as runner:
        handle = runner.run(sh("hostile", f"for i in 1 2 3; do echo {line}; done"), "local_cwd", {})
        runner.wait(handle, wait_interval=0.1, timeout=30)
    hostile = f"{API}/jobs/{enc(handle)}/logs?regex={urllib.parse.quote('(a+)+$')}&tail=100000"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        logs = pool.submit(request, lab, "GET", hostile)
        statuses = [pool.submit(request, lab, "GET", "/api/status") for _ in range(3)]
        for future in statuses:
            assert future.result(timeout=10)[0] == 200
        status, _, body = logs.result(timeout=10)
    assert status == 200 and json.loads(body)["lines"] == []
    status, _, body = request(lab, "GET", f"{API}/jobs/{enc(handle)}/logs?regex=(a)%5C1")
    assert status == 400 and b"RE2 syntax" in body


@pytest.mark.parametrize(
    "query",
    [
        "page=%C2%B2",
        "page=" + "9" * 5000,
        "per_page=-1",
        "state=BOGUS",
        "scheduler=" + "x" * 300,
        "q=" + "x" * 300,
    ],
)
def test_malformed_query_values_are_400(lab: Lab, query: str) -> None:
    status, _, body = request(lab, "GET", f"{API}/jobs?{query}")
    assert status == 400, (query, body[:200])


def test_a_store_of_100000_jobs_serves_bounded_pages(lab: Lab, store: Path) -> None:
    """Pages and counts come from indexed queries, and the event stream's reset sends the
    jobs not yet ended, not the whole store (the timings are in benchmarks/bench_server.py)."""
    import sqlite3

    db = sqlite3.connect(store / "jobs.sqlite")
    now = time.time() - 10 * 86400
    rows = [
        (
            f"local_cwd://torchx/bulk-{i}",
            "local_cwd",
            "torchx",
            f"bulk-{i}",
            f"bulk-{i}",
            "",
            now + i,
            "SUCCEEDED" if i % 2 else "FAILED",
            now + i,
            now + i + 1,
        )
        for i in range(100_000)
    ]
    db.executemany(
        "INSERT INTO jobs (handle, scheduler, session, app_id, name, image, submitted, state,"
        " updated, ended) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    db.commit()
    try:
        page = get(lab, f"{API}/jobs?per_page=50&page=3")
        assert page["total"] >= 100_000 and len(page["jobs"]) == 50
        assert page["counts"]["FAILED"] >= 50_000 and page["counts"]["SUCCEEDED"] >= 50_000
        found = get(lab, f"{API}/jobs?q=bulk-99999")
        assert [j["handle"] for j in found["jobs"]] == ["local_cwd://torchx/bulk-99999"]
        _, _, body = request(lab, "GET", f"{API}/events?once=1")
        events = sse(body.decode())
        assert events[0][0] == "reset"
        assert not [
            d
            for k, d in events
            if k == "job" and d["handle"].startswith("local_cwd://torchx/bulk-")
        ]
    finally:
        db.execute("DELETE FROM jobs WHERE handle LIKE 'local_cwd://torchx/bulk-%'")
        db.commit()
        db.close()


def test_responses_mask_a_failed_jobs_secrets(lab: Lab, store: Path, tmp_path: Path) -> None:
    import shlex
    import sys

    from tests import masking_corpus as corpus

    script = tmp_path / "fail.py"
    script.write_text(corpus.failing_job_source())
    with get_runner() as runner:
        handle = runner.run(
            sh("leaky", f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"),
            "local_cwd",
            {},
        )
        runner.wait(handle, wait_interval=0.1, timeout=60)
    bodies = [
        get(lab, f"{API}/jobs/{enc(handle)}"),
        get(lab, f"{API}/jobs/{enc(handle)}/logs"),
        get(lab, f"{API}/jobs/{enc(handle)}/logs?tail=3&stream=stdout"),
        get(lab, f"{API}/jobs?q=leaky"),
    ]
    _, _, events = request(lab, "GET", f"{API}/events?once=1")
    text = json.dumps(bodies) + events.decode()
    assert corpus.leaked(text) == [], text
    assert "DB_PASS=****" in text and "--password ****" in text


def test_result_and_outputs_of_a_cell_job(lab: Lab, store: Path, tmp_path: Path) -> None:
    """A cell job's value (its repr, masked, never unpickled on the server), its output files
    and one file's bytes streamed back; paths that reach out of the output folder are 404s."""
    from torchx_nb.components.cell import cell

    ws = tmp_path / "ws"
    ws.mkdir()
    source = (
        "import os\n"
        "out = os.environ['TORCHX_OUTPUT_DIR']\n"
        "os.makedirs(out + '/sub dir', exist_ok=True)\n"
        "open(out + '/sub dir/w&x.bin', 'wb').write(bytes(range(256)) * 4096)\n"
        "{'loss': 0.25, 'token': 'password=hunter2'}\n"
    )
    with get_runner() as runner:
        handle = runner.run(cell(source=source), "local_cwd", {}, workspace=str(ws))
        status = runner.wait(handle, wait_interval=0.2)
        assert status is not None and status.state.name == "SUCCEEDED"
    body = get(lab, f"{API}/jobs/{enc(handle)}/result")
    conforms(body, "/torchx-nb/api/jobs/{handle}/result")
    assert body["result"].startswith("{'loss': 0.25, 'token': '")
    assert "hunter2" not in body["result"]
    assert body["location"].startswith("file://")
    listing = get(lab, f"{API}/jobs/{enc(handle)}/outputs")
    conforms(listing, "/torchx-nb/api/jobs/{handle}/outputs")
    assert listing["files"] == [{"path": "sub dir/w&x.bin", "size": 256 * 4096}]
    status_code, headers, data = request(
        lab, "GET", f"{API}/jobs/{enc(handle)}/outputs/{enc('sub dir/w&x.bin')}"
    )
    assert status_code == 200 and data == bytes(range(256)) * 4096
    assert headers["Content-Type"] == "application/octet-stream"
    assert "attachment" in headers["Content-Disposition"]
    # the listing's path with its slash as is (it was a 404: the route took no "/")
    status_code, _, data = request(
        lab, "GET", f"{API}/jobs/{enc(handle)}/outputs/sub%20dir/w%26x.bin"
    )
    assert status_code == 200 and data == bytes(range(256)) * 4096
    for hostile in ("../state.json", "/etc/passwd", ".torchx-nb/result.pkl", "sub dir"):
        status_code, _, _ = request(lab, "GET", f"{API}/jobs/{enc(handle)}/outputs/{enc(hostile)}")
        assert status_code == 404, hostile
    for hostile in (
        "sub%20dir/../../state.json",
        "sub%20dir/..%2F..%2Fstate.json",
        "..%2F..%2Fstate.json",
        "%2Fetc%2Fpasswd",
        "/etc/passwd",
        ".torchx-nb/result.pkl",
    ):
        status_code, _, _ = request(lab, "GET", f"{API}/jobs/{enc(handle)}/outputs/{hostile}")
        assert status_code == 404, hostile
    status_code, _, _ = request(
        lab, "GET", f"{API}/jobs/{enc(handle)}/outputs/{enc('sub dir/w&x.bin')}", token=False
    )
    assert status_code == 403
    missing = f"{API}/jobs/{enc('local_cwd://torchx/nope')}"
    assert request(lab, "GET", f"{missing}/result")[0] == 404
    assert request(lab, "GET", f"{missing}/outputs")[0] == 404


def test_output_files_named_like_the_job_routes_download(
    lab: Lab, store: Path, tmp_path: Path
) -> None:
    """Files named ``logs``, ``result``, ``cancel``, ``outputs`` and ``notebook``: before, the
    job routes took ``H/outputs`` for the handle (404, and 405 for ``cancel``)."""
    from torchx_nb.components.cell import cell

    names = ("logs", "result", "cancel", "outputs", "notebook")
    source = (
        "import os\n"
        f"for name in {names!r}:\n"
        "    open(os.path.join(os.environ['TORCHX_OUTPUT_DIR'], name), 'w').write(name * 3)\n"
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    with get_runner() as runner:
        handle = runner.run(cell(source=source), "local_cwd", {}, workspace=str(ws))
        status = runner.wait(handle, wait_interval=0.2)
        assert status is not None and status.state.name == "SUCCEEDED"
    listing = get(lab, f"{API}/jobs/{enc(handle)}/outputs")
    assert sorted(f["path"] for f in listing["files"]) == sorted(names)
    for name in names:
        status_code, headers, data = request(lab, "GET", f"{API}/jobs/{enc(handle)}/outputs/{name}")
        assert (status_code, data) == (200, (name * 3).encode()), name
        assert "attachment" in headers["Content-Disposition"]
    # the job routes themselves still answer
    assert get(lab, f"{API}/jobs/{enc(handle)}")["handle"] == handle
    assert "lines" in get(lab, f"{API}/jobs/{enc(handle)}/logs")
