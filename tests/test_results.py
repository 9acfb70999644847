"""Reading a job's output folder back: a local folder, S3 (moto_server) and GCS
(gcp-storage-emulator) through the real clients; hostile keys, links and names; downloads that
stream in chunks with bounded memory."""

from __future__ import annotations

import io
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from torchx_nb.results import (
    GcsStore,
    LocalStore,
    NoResult,
    S3Store,
    download,
    load_result,
    no_result_reason,
    outputs,
    result_repr,
    store_for,
)
from torchx_nb.specs.api import (
    AppState,
    AppStatus,
    ReplicaStatus,
    RoleStatus,
    TorchxNbError,
)


def fill(root: Path) -> None:
    (root / ".torchx-nb").mkdir(parents=True)
    (root / ".torchx-nb" / "result.txt").write_text("42")
    (root / "a").mkdir()
    (root / "a" / "b.txt").write_text("bee")
    (root / "top.bin").write_bytes(b"\0" * 10)


def test_local_store_lists_reads_and_refuses_paths_outside(tmp_path: Path) -> None:
    root = tmp_path / "out"
    fill(root)
    secret = tmp_path / "secret.txt"
    secret.write_text("private")
    (root / "link").symlink_to(secret)  # a link the job made to a file outside
    store = LocalStore(f"file://{root}")
    assert [f.path for f in outputs(store)] == ["a/b.txt", "top.bin"]
    assert result_repr(store) == "42"
    with store.open("a/b.txt") as f:
        assert f.read() == b"bee"
    for hostile in ("../secret.txt", "/etc/passwd", "a/../../secret.txt", "", "link"):
        with pytest.raises((TorchxNbError, OSError)):
            store.open(hostile).close()


def test_download_keeps_paths_streams_and_leaves_no_partial_file(tmp_path: Path) -> None:
    root = tmp_path / "out"
    fill(root)
    big = root / "big.bin"
    with open(big, "wb") as f:
        for _ in range(64):
            f.write(os.urandom(1 << 20))
    seen: list[tuple[int, int, str]] = []
    tracemalloc.start()
    dest = download(LocalStore(f"file://{root}"), tmp_path / "dl", lambda *a: seen.append(a))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 1e6:.1f} MB for a 64 MiB file"
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == ["a/b.txt", "big.bin", "top.bin"]
    assert (dest / "big.bin").read_bytes() == big.read_bytes()
    assert seen[-1][2] == "top.bin" and (64 << 20, 64 << 20, "big.bin") in seen


class _Keys:
    """A store whose listing holds keys a hostile job could write."""

    url = "s3://b/p/"

    def __init__(self, keys: list[str]) -> None:
        self.keys = keys

    def list(self) -> list[Any]:
        from torchx_nb.results import OutputFile

        return [OutputFile(k, 1) for k in self.keys]

    def open(self, path: str) -> Any:
        return io.BytesIO(b"x")


@pytest.mark.parametrize("key", ["../escape.txt", "a/../../escape.txt", "/abs.txt", "..", "a\0b"])
def test_download_refuses_keys_that_reach_out_of_the_folder(tmp_path: Path, key: str) -> None:
    dest = tmp_path / "dl"
    with pytest.raises(TorchxNbError, match="not a path inside"):
        download(_Keys(["ok.txt", key]), dest)  # type: ignore[arg-type]
    assert not (tmp_path / "escape.txt").exists() and not Path("/abs.txt").exists()


def test_s3_store_through_moto(aws_env: Any, tmp_path: Path) -> None:
    s3 = aws_env.client("s3")
    s3.create_bucket(Bucket="res", CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    for key, body in {
        "runs/j1/.torchx-nb/result.txt": b"'ok'",
        "runs/j1/x/y.txt": b"why",
        "runs/j1/z.bin": b"z" * (3 << 20),
        "runs/j10/other.txt": b"another job's",  # a prefix sibling is not ours
    }.items():
        s3.put_object(Bucket="res", Key=key, Body=body)
    store = store_for("s3://res/runs/j1/")
    assert isinstance(store, S3Store)
    assert [(f.path, f.size) for f in outputs(store)] == [("x/y.txt", 3), ("z.bin", 3 << 20)]
    assert result_repr(store) == "'ok'"
    dest = download(store, tmp_path / "dl")
    assert (dest / "x" / "y.txt").read_bytes() == b"why"
    assert (dest / "z.bin").stat().st_size == 3 << 20


def test_gcs_store_through_the_emulator(gcs_env: Any, tmp_path: Path) -> None:
    bucket = gcs_env.bucket("results-bucket")
    bucket.blob("jobs/a1/.torchx-nb/result.txt").upload_from_string(b"[1, 2]")
    bucket.blob("jobs/a1/model/w.bin").upload_from_string(b"w" * 5000)
    store = store_for("gs://results-bucket/jobs/a1")
    assert isinstance(store, GcsStore)
    assert [(f.path, f.size) for f in outputs(store)] == [("model/w.bin", 5000)]
    assert result_repr(store) == "[1, 2]"
    dest = download(store, tmp_path / "dl")
    assert (dest / "model" / "w.bin").read_bytes() == b"w" * 5000


def test_no_result_says_how_the_job_ended() -> None:
    killed = AppStatus(
        state=AppState.FAILED,
        roles=[RoleStatus("cell", [ReplicaStatus(0, AppState.FAILED, "cell", "h", exit_code=137)])],
    )
    assert no_result_reason(killed, "h") == (
        "h ended FAILED (cell/0 exit code 137) without a result: it was killed, ran out of"
        " memory or was cancelled before its cell finished"
    )
    assert "is RUNNING: it has no result yet" in no_result_reason(
        AppStatus(state=AppState.RUNNING), "h"
    )
    with pytest.raises(NoResult, match="ended CANCELLED"):
        load_result(_Keys([]), AppStatus(state=AppState.CANCELLED), "h")  # type: ignore[arg-type]
    with pytest.raises(TorchxNbError, match="unknown output location"):
        store_for("ftp://x/y")


def test_a_corrupt_or_foreign_result_is_one_line(tmp_path: Path) -> None:
    import pickle

    root = tmp_path / "out"
    (root / ".torchx-nb").mkdir(parents=True)
    store = LocalStore(f"file://{root}")
    ok = AppStatus(state=AppState.SUCCEEDED)
    (root / ".torchx-nb" / "result.pkl").write_bytes(b"\x80\x05truncated")
    with pytest.raises(TorchxNbError, match=r"^the result of h cannot be unpickled \("):
        load_result(store, ok, "h")
    # a pickle that names a module this kernel lacks
    import posixpath

    forged = pickle.dumps({"value": posixpath.join}, protocol=4)
    forged = forged.replace(b"posixpath", b"nosuchmod")  # same length: still a valid pickle
    (root / ".torchx-nb" / "result.pkl").write_bytes(forged)
    with pytest.raises(TorchxNbError, match="needs the module 'nosuchmod'"):
        load_result(store, ok, "h")
    (root / ".torchx-nb" / "result.pkl").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(TorchxNbError, match="is not one torchx_nb's cell runner wrote"):
        load_result(store, ok, "h")


def test_metric_times_are_when_lines_were_written_or_not_known(aws_env: Any) -> None:
    """Points parsed after the fact carry their line's time where the backend kept it
    (CloudWatch events, here moto's), and NaT where it did not (a local log file), never the
    time they were parsed."""
    import pandas as pd

    from torchx_nb.metrics import MetricLog, parse_metric
    from torchx_nb.schedulers.aws_common import cloudwatch_events

    logs = aws_env.client("logs")
    import uuid

    group = f"/test/metric-times/{uuid.uuid4().hex}"  # moto is shared by the whole run
    logs.create_log_group(logGroupName=group)
    logs.create_log_stream(logGroupName=group, logStreamName="train/0")
    import time

    base = (int(time.time()) - 3600) * 1000  # CloudWatch takes events of the last 14 days
    logs.put_log_events(
        logGroupName=group,
        logStreamName="train/0",
        logEvents=[
            {"timestamp": base + i * 60_000, "message": f"loss: {1 / (i + 1)}"} for i in range(3)
        ],
    )
    lines = list(cloudwatch_events(logs, group, "train/0"))
    frame = MetricLog([parse_metric("loss=loss: ([0-9.]+)")]).feed_all(lines).frame()
    assert list(frame["value"]) == [1.0, 0.5, 1 / 3]
    assert [t.timestamp() for t in frame["time"]] == [base / 1000 + i * 60 for i in range(3)]

    plain = MetricLog([parse_metric("loss=loss: ([0-9.]+)$")]).feed_all(["loss: 2\n", "loss: 1\n"])
    frame = plain.frame()
    assert list(frame["value"]) == [2.0, 1.0] and frame["time"].isna().all()
    assert isinstance(frame["time"].dtype, pd.DatetimeTZDtype)
