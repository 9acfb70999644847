"""The event stream of a real jupyter_server (the installed package's extension) when it is
resumed, and when its job store is swapped under it: headers at once, one ``reset`` instead of
a replay of every row, and no silence after a store restored from a backup. The heartbeat is
set long (300 s) so that nothing here can pass by waiting for it."""

from __future__ import annotations

import http.client
import json
import os
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.infra.lab import Lab, jupyter_lab, lab_missing
from tests.server.api_client import API, get
from torchx_nb.jobstore import JobRecord, JobStore

pytestmark = pytest.mark.slow

HEARTBEAT = 300


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = lab_missing()
    if reason:
        from tests.infra.fixtures import missing

        missing(reason)
    root = tmp_path_factory.mktemp("stream") / "root"
    data = root.parent / "data"
    args = [f"--TorchxNbApp.heartbeat={HEARTBEAT}", "--TorchxNbApp.local_interval=0.3"]
    with jupyter_lab(root, env={"TORCHX_NB_DATA_DIR": str(data)}, args=args) as server:
        server.data_dir = data  # type: ignore[attr-defined]
        yield server


@pytest.fixture
def store(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(lab.data_dir))  # type: ignore[attr-defined]
    JobStore()  # made, as the server's first look makes it
    return lab.data_dir / "jobs.sqlite"  # type: ignore[attr-defined,no-any-return]


def record(name: str, state: str = "RUNNING") -> JobRecord:
    t = time.time()
    return JobRecord(
        f"local_cwd://torchx/{name}", "local_cwd", "torchx", name, name, "", t, state, t
    )


def fill(path: Path, count: int, prefix: str) -> None:
    """``count`` ended jobs written straight into the store at ``path`` (one transaction)."""
    JobStore(path)
    db = sqlite3.connect(path)
    now = time.time() - 86400
    db.executemany(
        "INSERT INTO jobs (handle, scheduler, session, app_id, name, image, submitted, state,"
        " updated, ended) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (f"local_cwd://torchx/{prefix}-{i}", "local_cwd", "torchx", f"{prefix}-{i}",
             f"{prefix}-{i}", "", now + i, "SUCCEEDED", now + i, now + i + 1)
            for i in range(count)
        ],
    )  # fmt: skip
    db.commit()
    db.close()


def put_in_place(source: Path, target: Path) -> None:
    """``mv source target``, as a user swaps stores (the old one's journal files go too)."""
    for sfx in ("-wal", "-shm"):
        Path(f"{target}{sfx}").unlink(missing_ok=True)
    os.replace(source, target)


class Stream:
    """An open event stream, read one event at a time."""

    def __init__(self, lab: Lab, last_event_id: str | None, timeout: float = 60) -> None:
        self.conn = http.client.HTTPConnection(
            urllib.parse.urlsplit(lab.url).netloc, timeout=timeout
        )
        headers = {"Authorization": f"token {lab.token}"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", f"{API}/events", headers=headers)
        self.response = self.conn.getresponse()  # returns once the headers are in

    def events(self, seconds: float) -> Iterator[tuple[str, Any]]:
        """(event, data) pairs and ("id", id) for ``seconds`` at most."""
        deadline = time.monotonic() + seconds
        kind, data = "message", ""
        while time.monotonic() < deadline:
            line = self.response.fp.readline().decode()
            if not line:
                return
            line = line.rstrip("\n")
            if line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif line.startswith("id: "):
                yield "id", line[4:]
            elif not line and data:
                yield kind, json.loads(data)
                kind, data = "message", ""

    def close(self) -> None:
        self.conn.close()


def test_a_resumed_stream_sends_its_headers_at_once(lab: Lab, store: Path) -> None:
    """The panel resumes from a jobs page's ``event_id``: the stream's headers must come
    before any change or heartbeat (the panel says "connecting…" until they do)."""
    position = get(lab, f"{API}/jobs?per_page=1")["event_id"]
    start = time.monotonic()
    stream = Stream(lab, position, timeout=HEARTBEAT / 5)
    try:
        assert stream.response.status == 200
        assert stream.response.getheader("Content-Type") == "text/event-stream"
        assert time.monotonic() - start < HEARTBEAT / 5
    finally:
        stream.close()


def test_a_populated_store_swapped_in_is_one_reset_not_a_replay(
    lab: Lab, store: Path, tmp_path: Path
) -> None:
    """``mv big.sqlite jobs.sqlite`` under a running server: the open stream gets a reset
    (the client reloads one page) instead of every row as a ``job`` event, and a job written to
    the new store afterwards still arrives."""
    big = tmp_path / "big.sqlite"
    fill(big, 20_000, "swapped")
    stream = Stream(lab, get(lab, f"{API}/jobs?per_page=1")["event_id"])
    try:
        put_in_place(big, store)
        jobs, resets = 0, 0
        for kind, _ in stream.events(30):
            jobs += kind == "job"
            resets += kind == "reset"
            if resets:
                break
        assert resets == 1 and jobs == 0, (resets, jobs)
        JobStore(store).add(record("after-swap"))
        wanted = "local_cwd://torchx/after-swap"
        assert any(k == "job" and d["handle"] == wanted for k, d in stream.events(60))
    finally:
        stream.close()
    page = get(lab, f"{API}/jobs?per_page=5")
    assert page["total"] == 20_001


def test_a_store_restored_from_a_backup_does_not_silence_the_stream(
    lab: Lab, store: Path, tmp_path: Path
) -> None:
    """A backup (a lower change counter than the server has seen) put back: the stream says
    reset, and the next job written to the restored store is sent."""
    backup = tmp_path / "backup.sqlite"
    with sqlite3.connect(store) as src, sqlite3.connect(backup) as dst:
        src.backup(dst)
    stream = Stream(lab, None)
    try:
        assert next(stream.events(30)) == ("reset", {})
        later = JobStore(store)
        for i in range(30):
            later.add(record(f"before-restore-{i}", "SUCCEEDED"))
        last = "local_cwd://torchx/before-restore-29"
        assert any(k == "job" and d["handle"] == last for k, d in stream.events(60))
        put_in_place(backup, store)
        assert any(kind == "reset" for kind, _ in stream.events(30))
        JobStore(store).add(record("after-restore"))
        wanted = "local_cwd://torchx/after-restore"
        assert any(k == "job" and d["handle"] == wanted for k, d in stream.events(60))
    finally:
        stream.close()
