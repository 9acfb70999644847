"""Checkpoints that travel, on real stores: a folder on disk, S3 (moto_server) and GCS
(gcp-storage-emulator). The job side is loaded as a job loads it: the standalone module by
path, in its own Python process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from torchx_nb.apps.cell_runner import checkpoint as ck
from torchx_nb.apps.cell_runner.generations import Generations, file_digest
from torchx_nb.apps.cell_runner.stores import store_for

APPS = str(Path(ck.__file__).parents[1])  # cell_runner/ is imported from there, alone


def _local(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return f"file://{tmp_path / 'store'}"


def _s3(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    aws = request.getfixturevalue("aws_env")
    name = f"ckpt-{abs(hash(request.node.name)) % 10**8}"
    aws.client("s3").create_bucket(
        Bucket=name, CreateBucketConfiguration={"LocationConstraint": "us-west-2"}
    )
    return f"s3://{name}/runs/job-1"


def _gcs(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    gcs = request.getfixturevalue("gcs_env")
    name = f"ckpt-{abs(hash(request.node.name)) % 10**8}"
    gcs.bucket(name)
    return f"gs://{name}/runs/job-1"


STORES: dict[str, Callable[[Path, pytest.FixtureRequest], str]] = {
    "local": _local,
    "s3": _s3,
    "gcs": _gcs,
}


@pytest.fixture(autouse=True)
def own_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session tells the program through this process's environment: undone after."""
    for name in list(os.environ):
        if name.startswith("TORCHX_NB_"):
            monkeypatch.delenv(name)
    for name in (ck.DIR_ENV, ck.BASE_ENV, ck.ATTEMPT_ENV, ck.PREEMPTIONS_ENV, ck.RESTORED_ENV):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


@pytest.fixture(params=sorted(STORES))
def store_url(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return STORES[request.param](tmp_path, request)


def write(folder: Path, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)


def contents(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# a job's save, in its own Python, stopped after its second upload of a generation: the
# test SIGKILLs it there, as a backend kills an attempt whose grace ran out
SAVE_AND_HANG = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
from cell_runner.generations import Generations
from cell_runner.stores import store_for
url, src, mark = sys.argv[2:5]
store = store_for(url, src)
real, done = store.put_file, []
def put_then_hang(key, path):
    real(key, path)
    done.append(key)
    if len(done) == 2:
        open(mark, "w").write("\n".join(done))
        time.sleep(600)
store.put_file = put_then_hang
Generations(store, 0).save(src)
"""


def test_a_save_killed_mid_upload_is_never_restored(tmp_path: Path, store_url: str) -> None:
    """SIGKILL in the middle of generation 2's upload: a restore gets generation 1 whole;
    the next save goes above the half one and is the one restored after it."""
    src, mark = tmp_path / "src", tmp_path / "uploaded"
    store = store_for(store_url, str(src))
    gens = Generations(store, 0)
    write(src, {"model.pt": b"weights-1", "opt.pt": b"opt-1", "step.txt": b"1"})
    assert gens.save(str(src)) == 1
    write(src, {"model.pt": b"weights-2", "opt.pt": b"opt-2", "step.txt": b"2"})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SAVE_AND_HANG, APPS, store_url, str(src), str(mark)], env=env
    )
    try:
        deadline = time.monotonic() + 60
        while not mark.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the save never began"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    uploaded = mark.read_text().split("\n")
    assert [k.rpartition("/")[0] for k in uploaded] == ["rank-0/gen-000002"] * 2
    assert set(uploaded) <= set(store.keys("rank-0/gen-000002/"))  # half there, no manifest
    assert "rank-0/gen-000002/MANIFEST.json" not in store.keys("rank-0/")

    restored = tmp_path / "attempt-2"
    manifest = Generations(store, 0).restore(str(restored))
    assert manifest is not None and manifest["generation"] == 1
    assert contents(restored) == {"model.pt": b"weights-1", "opt.pt": b"opt-1", "step.txt": b"1"}

    write(restored, {"step.txt": b"3"})
    assert Generations(store, 0).save(str(restored)) == 3
    again = tmp_path / "attempt-3"
    assert Generations(store, 0).restore(str(again))["generation"] == 3  # type: ignore[index]
    assert contents(again) == {"model.pt": b"weights-1", "opt.pt": b"opt-1", "step.txt": b"3"}


def test_only_changed_files_are_uploaded_and_two_generations_kept(
    tmp_path: Path, store_url: str
) -> None:
    """A save uploads the files whose sha256 changed (counted as objects in the store); the
    third save drops generation 1's manifest and the files no kept generation uses."""
    src = tmp_path / "src"
    store = store_for(store_url, str(src))
    gens = Generations(store, 0)
    write(src, {"big.bin": b"b" * 300_000, "a/small.txt": b"one", "c.txt": b"c"})
    gens.save(str(src))
    assert len(store.keys("rank-0/gen-000001/")) == 4  # three files and the manifest
    write(src, {"a/small.txt": b"two"})
    gens.save(str(src))
    assert store.keys("rank-0/gen-000002/") == [
        "rank-0/gen-000002/MANIFEST.json",
        "rank-0/gen-000002/a/small.txt",
    ]
    write(src, {"c.txt": b"c3"})
    (src / "a" / "small.txt").unlink()
    gens.save(str(src))
    assert store.keys("rank-0/gen-000003/") == [
        "rank-0/gen-000003/MANIFEST.json",
        "rank-0/gen-000003/c.txt",
    ]
    # generation 1 is no longer a generation; its files generation 2 still uses stay
    assert store.keys("rank-0/gen-000001/") == [
        "rank-0/gen-000001/big.bin",
        "rank-0/gen-000001/c.txt",
    ]
    gens.save(str(src))  # nothing changed: a manifest only
    assert store.keys("rank-0/gen-000004/") == ["rank-0/gen-000004/MANIFEST.json"]
    assert store.keys("rank-0/gen-000001/") == ["rank-0/gen-000001/big.bin"]
    assert store.keys("rank-0/gen-000002/") == []
    assert store.get_bytes("rank-0/LATEST") == b"4"
    out = tmp_path / "out"
    (out / "stale").mkdir(parents=True)
    (out / "stale" / "after-the-save.txt").write_text("not in the checkpoint")
    Generations(store, 0).restore(str(out))
    assert contents(out) == {"big.bin": b"b" * 300_000, "c.txt": b"c3"}


def test_a_generation_whose_file_differs_is_passed_over(tmp_path: Path) -> None:
    """A committed file that no longer matches its sha256 (a racing writer overwrote it)
    makes the restore take the generation before."""
    src = tmp_path / "src"
    store = store_for(f"file://{tmp_path / 'store'}", str(src))
    write(src, {"w.pt": b"first"})
    Generations(store, 0).save(str(src))
    write(src, {"w.pt": b"second"})
    Generations(store, 0).save(str(src))
    store.put_bytes("rank-0/gen-000002/w.pt", b"overwritten")
    out = tmp_path / "out"
    assert Generations(store, 0).restore(str(out))["generation"] == 1  # type: ignore[index]
    assert contents(out) == {"w.pt": b"first"}


def test_each_rank_has_its_own_folder(tmp_path: Path) -> None:
    """Two ranks of one attempt save into one store; each restores its own files only, and
    rank 0 alone keeps the ledger."""
    url = f"file://{tmp_path / 'store'}"
    env = {
        **os.environ,
        ck.URL_ENV: url,
        ck.DIR_ENV: str(tmp_path / "local"),
        # the backend's attempt, as Slurm gives it: rank 1 finds the attempt rank 0 began
        ck.ATTEMPT_ENV_ENV: "SLURM_RESTART_COUNT",
        "SLURM_RESTART_COUNT": "0",
        "SLURM_JOB_ID": "77",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    script = (
        "import os, sys\n"
        f"sys.path.insert(0, {APPS!r})\n"
        "from cell_runner import checkpoint as ck\n"
        "s = ck.Session.from_env()\n"
        "s.begin()\n"
        "d = os.environ[ck.DIR_ENV]\n"
        "open(os.path.join(d, 'state.txt'), 'w').write(f'rank {s.rank} attempt {s.attempt}')\n"
        "s.save()\n"
        "s.end('sigterm')\n"
        "print(d)\n"
    )
    folders = {}
    for rank in (0, 1):
        done = subprocess.run(
            [sys.executable, "-c", script],
            env={**env, "RANK": str(rank)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        folders[rank] = done.stdout.strip()
    assert folders == {r: str(tmp_path / "local" / f"rank-{r}") for r in (0, 1)}
    store = store_for(url, "")
    for rank in (0, 1):
        out = tmp_path / f"restored-{rank}"
        Generations(store, rank).restore(str(out))
        assert contents(out) == {"state.txt": f"rank {rank} attempt 1".encode()}
    ledger = ck.read_ledger(store)
    assert [(e["n"], e["why"], e["ckpt_generation"], e["native"]) for e in ledger] == [
        (1, "sigterm", 1, "77/0")
    ]


def test_every_rank_of_an_attempt_reads_its_number_when_rank_1_starts_first(
    tmp_path: Path,
) -> None:
    """local_cwd's supervisor gives every replica of an attempt ``$TORCHX_NB_LOCAL_ATTEMPT``:
    a rank 1 that begins before rank 0 has added attempt 2 (attempt 1's entry still says
    ``running``) waits for it and reads attempt 2, not the old attempt's number."""
    url = f"file://{tmp_path / 'store'}"
    env = {
        **os.environ,
        ck.URL_ENV: url,
        ck.DIR_ENV: str(tmp_path / "local"),
        ck.ATTEMPT_ENV_ENV: "TORCHX_NB_LOCAL_ATTEMPT",
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    script = (
        f"import sys\nsys.path.insert(0, {APPS!r})\n"
        "from cell_runner import checkpoint as ck\n"
        "s = ck.Session.from_env()\ns.begin()\nprint(s.attempt)\n"
    )

    def start(rank: int, attempt: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", script],
            env={**env, "RANK": str(rank), "TORCHX_NB_LOCAL_ATTEMPT": str(attempt)},
            stdout=subprocess.PIPE,
            text=True,
        )

    first = start(0, 1)  # attempt 1's rank 0: its entry says running (killed without a word)
    assert first.communicate(timeout=60)[0].strip() == "1"
    rank1 = start(1, 2)
    time.sleep(1.5)
    assert rank1.poll() is None  # waiting for rank 0
    rank0 = start(0, 2)
    assert (rank0.communicate(timeout=60)[0].strip(), rank1.communicate(timeout=60)[0].strip()) == (
        "2",
        "2",
    )
    ledger = ck.read_ledger(store_for(url, ""))
    assert [(e["n"], e["why"], e["native"]) for e in ledger] == [
        (1, "lost", "/1"),
        (2, "running", "/2"),
    ]


def test_the_ledger_counts_attempts_preemptions_and_failures(tmp_path: Path) -> None:
    """Attempts count from 1 across preemptions and failures; an attempt that never said how
    it ended (killed without a SIGTERM: SIGKILL, OOM, a node lost) is a failure, never a
    preemption; past max_retries failures the attempt says so before the program runs."""
    store = store_for(f"file://{tmp_path / 'store'}", "")
    seen = []
    for why in ("sigterm", None, "exit 1", "exit 3", "exit 170"):
        s = ck.Session(str(tmp_path / "local" / "rank-0"), store, 0)
        s.begin()
        seen.append((s.attempt, s.preemptions, s.failures))
        if why is not None:
            s.end(why)
    assert seen == [(1, 0, 0), (2, 1, 0), (3, 1, 1), (4, 1, 2), (5, 1, 3)]
    assert [e["why"] for e in ck.read_ledger(store)] == [
        "sigterm",
        "lost",
        "exit 1",
        "exit 3",
        "exit 170",
    ]
    last = ck.Session(str(tmp_path / "local" / "rank-0"), store, 0)
    os.environ[ck.MAX_RETRIES_ENV] = "2"
    try:
        last.begin()
        assert last.retries_spent() == (
            "the program failed 3 times (max_retries 2): not run again (attempt 6, 1 preemptions)"
        )
        os.environ[ck.MAX_RETRIES_ENV] = "3"
        assert last.retries_spent() is None
    finally:
        del os.environ[ck.MAX_RETRIES_ENV]


def test_the_job_side_imports_no_sdk(tmp_path: Path) -> None:
    """Loaded by path as the job loads it, the module imports only the standard library: a
    local store saves and restores without boto3 or google-cloud-storage loaded."""
    script = (
        "import sys\n"
        f"sys.path.insert(0, {APPS!r})\n"
        "from cell_runner.generations import Generations\n"
        "from cell_runner.stores import store_for\n"
        "import os\n"
        f"src = {str(tmp_path / 'src')!r}\n"
        "os.makedirs(src); open(os.path.join(src, 'x'), 'w').write('x')\n"
        f"store = store_for({'file://' + str(tmp_path / 'store')!r}, src)\n"
        "Generations(store).save(src)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in"
        " ('boto3', 'botocore', 'google', 'torchx_nb'))\n"
        "print(loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
    assert json.loads((tmp_path / "store" / "rank-0" / "gen-000001" / "MANIFEST.json").read_text())[
        "files"
    ] == {
        "x": {
            "sha256": file_digest(str(tmp_path / "src" / "x"))[0],
            "size": 1,
            "from": 1,
            "mtime": (tmp_path / "src" / "x").stat().st_mtime,
        }
    }


@pytest.mark.parametrize("url", ["ftp://h/x", "s3://", "gs:///p", "sagemaker:x", "/abs/path"])
def test_a_checkpoint_url_of_no_store_is_one_line(url: str) -> None:
    with pytest.raises(ValueError, match="is none of file://PATH, s3://BUCKET/PREFIX"):
        store_for(url, "/tmp")


def test_an_attempt_killed_without_sigterm_is_a_reclaim_where_the_backend_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempts that never said how they ended (killed without a SIGTERM): those the job sent
    again names (``TORCHX_NB_RECLAIMED``: ``JOB/N``, or ``JOB`` for that native job's last
    attempt, a multi-node job's ``JOB#0`` too, which ``JOB/N`` names as well) are reclaims —
    preemptions, not failures; the others stay the program's failures (SIGKILL, OOM). Where
    the backend named a job's attempts one by one, ``JOB`` does not name that job's last
    entry when that is an attempt of another number (the reclaimed one never began). With
    max_retries 0 every one is a reclaim: no backend runs such a job again after the
    program's failure."""
    store = store_for(f"file://{tmp_path / 'store'}", "")
    earlier = [
        {"n": 1, "why": "running", "native": "J1/1", "job": "J1"},  # named
        {"n": 2, "why": "running", "native": "J1/2", "job": "J1"},  # OOM-killed: not named
        {"n": 3, "why": "running", "native": "J1/3", "job": "J1"},  # named
        {"n": 4, "why": "running", "native": "J2#0/1", "job": "J2#0"},  # multi-node's last
        {"n": 5, "why": "running", "native": "J3/1", "job": "J3"},  # no token: a failure
    ]
    batch_like = [  # J5#0/2 reclaimed before its runner began: J5#0/1 (OOM) is J5's last entry
        {"n": 1, "why": "running", "native": "J5#0/1", "job": "J5#0"},
    ]
    store.put_bytes(ck.LEDGER, json.dumps(earlier).encode())
    for name in (ck.BASE_ENV, ck.DIR_ENV, ck.ATTEMPT_ENV, ck.PREEMPTIONS_ENV, ck.RESTORED_ENV):
        monkeypatch.delenv(name, raising=False)  # begin() exports them: put back after
    monkeypatch.setenv(ck.RECLAIMED_ENV, "J1/1,J1/3,J1, J2")
    monkeypatch.setenv(ck.MAX_RETRIES_ENV, "2")
    monkeypatch.setenv(ck.ATTEMPT_ENV_ENV, "AWS_BATCH_JOB_ATTEMPT")
    monkeypatch.setenv("AWS_BATCH_JOB_ID", "J4")
    monkeypatch.setenv("AWS_BATCH_JOB_ATTEMPT", "1")
    s = ck.Session(str(tmp_path / "local" / "rank-0"), store, 0)
    s.begin()
    assert (s.attempt, s.preemptions, s.failures, s.retries_spent()) == (6, 3, 2, None)
    ledger = ck.read_ledger(store)
    whys = ["reclaimed", "lost", "reclaimed", "reclaimed", "lost", "running"]
    assert [e["why"] for e in ledger] == whys
    assert (ledger[-1]["native"], ledger[-1]["job"]) == ("J4/1", "J4")
    assert os.environ[ck.PREEMPTIONS_ENV] == "3"

    store.put_bytes(ck.LEDGER, json.dumps(batch_like).encode())
    monkeypatch.setenv(ck.RECLAIMED_ENV, "J5/2,J5")
    s = ck.Session(str(tmp_path / "local" / "rank-0"), store, 0)
    s.begin()
    assert [e["why"] for e in ck.read_ledger(store)] == ["lost", "running"]
    store.put_bytes(ck.LEDGER, json.dumps(batch_like).encode())
    monkeypatch.setenv(ck.RECLAIMED_ENV, "J5/1,J5/2,J5")  # J5/1 named: J5#0/1 is it
    s = ck.Session(str(tmp_path / "local" / "rank-0"), store, 0)
    s.begin()
    assert [e["why"] for e in ck.read_ledger(store)] == ["reclaimed", "running"]

    store.put_bytes(ck.LEDGER, json.dumps(earlier).encode())
    monkeypatch.delenv(ck.RECLAIMED_ENV)
    monkeypatch.setenv(ck.MAX_RETRIES_ENV, "0")
    s = ck.Session(str(tmp_path / "local" / "rank-0"), store, 0)
    s.begin()
    assert (s.attempt, s.preemptions, s.failures, s.retries_spent()) == (6, 5, 0, None)
    monkeypatch.setenv(ck.MAX_RETRIES_ENV, "1")  # without a word: each is the program's
    store.put_bytes(ck.LEDGER, json.dumps(earlier).encode())
    s = ck.Session(str(tmp_path / "local" / "rank-0"), store, 0)
    s.begin()
    assert (s.preemptions, s.failures) == (0, 5)
    assert s.retries_spent() == (
        "the program failed 5 times (max_retries 1): not run again (attempt 6, 0 preemptions)"
    )
