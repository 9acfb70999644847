"""The slurm backend against a real private cluster (slurmctld, two slurmd, slurmdbd with
MariaDB; tests/infra/slurm.py), plus the request's shape and both generations' JSON."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, cli, shell_app, wait_for
from tests.infra.slurm import SlurmCluster
from torchx_nb import specs
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.api import ListAppResponse
from torchx_nb.schedulers.slurm import SlurmScheduler
from torchx_nb.schedulers.slurm.jobs import combined_state, parse_jobs
from torchx_nb.schedulers.slurm.request import _memory_allowed
from torchx_nb.specs.api import AppState, AppStatus
from torchx_nb.specs.log_line import Stream

FIXTURES = ROOT / "tests" / "fixtures" / "slurm"


def _role(name: str, *args: str, replicas: int = 1, **kw: object) -> specs.Role:
    return specs.Role(
        name=name,
        image="",
        entrypoint="bash",
        args=["-c", *args],
        num_replicas=replicas,
        resource=specs.Resource(cpu=1, gpu=0, memMB=200),
        **kw,  # type: ignore[arg-type]
    )


def _script(app: specs.AppDef, **cfg: object) -> str:
    info = SlurmScheduler("torchx").submit_dryrun(app, cfg)  # type: ignore[arg-type]
    return info.request.materialize()


# ---- the request ------------------------------------------------------------------------


def test_script_has_torchx_shape_and_our_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no sinfo: memory is requested, as in TorchX
    app = specs.AppDef(
        "two",
        roles=[
            _role("a", "echo a", replicas=2, env={"X": "1,2", "Y": "it's"}, max_retries=3),
            _role("b", "echo $$${rank0_env} ${replica_id} ${app_id} $${app_id}", max_retries=1),
        ],
    )
    app.roles[1].resource = specs.Resource(cpu=2, gpu=1, memMB=300)
    text = _script(
        app,
        partition="debug",
        time="10",
        qos="high",
        account="lab",
        exclusive=True,
        nodelist="n1,n2,n3",
        exclude="n9",
        comment="c",
    )
    head, _, body = text.partition("\nset -evx\n")
    sbatch = [ln for ln in head.splitlines() if ln.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --job-name=a-0 --requeue --partition=debug --time=10 --qos=high --account=lab"
        " --ntasks-per-node=1 --cpus-per-task=1 --mem=200 --exclusive --nodelist=n1 --exclude=n9",
        "#SBATCH hetjob",
        "#SBATCH --job-name=a-1 --requeue --partition=debug --time=10 --qos=high --account=lab"
        " --ntasks-per-node=1 --cpus-per-task=1 --mem=200 --exclusive --nodelist=n2 --exclude=n9",
        "#SBATCH hetjob",
        "#SBATCH --job-name=b-0 --requeue --partition=debug --time=10 --qos=high --account=lab"
        " --ntasks-per-node=1 --cpus-per-task=2 --mem=300 --gpus-per-task=1 --exclusive"
        " --nodelist=n3 --exclude=n9",
    ]
    assert "# Run with: sbatch --parsable --comment=c\n" in head
    assert "export TORCHX_MAX_RETRIES=1\n" in body
    srun = body.split("srun ", 1)[1].split(" &\nsrun_pid=$!\n")[0]
    groups = srun.split(" :\\\n     ")  # TorchX's continuation: " :\\", a newline, 5 spaces
    assert len(groups) == 3
    assert groups[0].startswith(
        '--output=slurm-"$SLURM_JOB_ID"-a-0.out --error=slurm-"$SLURM_JOB_ID"-a-0.err'
        " --wait=60 --kill-on-bad-exit=1 '--export=ALL,TORCHX_REPLICA_ID=0,Y=it'\"'\"'s'"
        " env X=1,2 bash -c 'echo a'"
    )
    # the macros: rank0 host for the shell, the replica index, the job id; a literal
    # "${app_id}" the user escaped stays text
    assert groups[2].endswith(
        "bash -c 'echo $SLURM_JOB_NODELIST_HET_GROUP_0 0 '\"$SLURM_JOB_ID\"' ${app_id}'"
    )
    assert 'scontrol requeue "$SLURM_JOB_ID"' in body
    # a cancel's SIGTERM to the script goes on to the steps (not srun, which would SIGKILL them)
    assert "trap 'cancelled=1' TERM\n" in body
    assert 'scancel --signal=TERM "$SLURM_JOB_ID"' in body


def test_gpus_per_node_and_one_node_per_replica() -> None:
    app = specs.AppDef("g", roles=[_role("a", "true")])
    app.roles[0].resource = specs.Resource(cpu=1, gpu=2, memMB=0)
    assert "--gpus-per-node=2" in _script(app, gpus_per_node=True)
    with pytest.raises(ValueError, match="nodelist names 2 nodes for 1 replicas"):
        get_runner().dryrun(app, "slurm", {"nodelist": "n1,n2"})


def test_dryrun_masks_secrets_and_submits_nothing(isolated: Path) -> None:
    app = specs.AppDef("s", roles=[_role("a", "true", env={"HF_TOKEN": "hf_abc123"})])
    info = get_runner().dryrun(app, "slurm", {})
    shown = str(info)
    assert "hf_abc123" not in shown and "HF_TOKEN=****" in shown
    assert "HF_TOKEN=hf_abc123" in info.request.materialize()


def test_memory_probe_reads_sinfo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "sinfo"
    fake.write_text("#!/bin/sh\nprintf 'PARTITION,MEMORY\\nsmall*,1000\\nbig,64000+\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert _memory_allowed(None) is False
    assert _memory_allowed("big") is True
    app = specs.AppDef("m", roles=[_role("a", "true")])
    assert "--mem" not in _script(app)
    assert "--mem=200" in _script(app, partition="big")


# ---- both JSON generations --------------------------------------------------------------


def test_squeue_json_of_22_05_and_24_11() -> None:
    old = parse_jobs(json.loads((FIXTURES / "squeue-22.05.json").read_text()))
    (job,) = old.values()
    assert [c.name for c in job.components] == ["trainer-0", "trainer-1"]
    assert [c.state for c in job.components] == [AppState.RUNNING] * 2
    assert job.components[1].node == "127.0.0.2"
    new = parse_jobs(json.loads((FIXTURES / "squeue-24.11.json").read_text()))
    assert sorted(new) == ["41", "43"]
    assert [c.job_id for c in new["41"].components] == [41, 42]
    assert combined_state(c.state for c in new["41"].components) == AppState.RUNNING
    assert new["43"].components[0].state == AppState.PENDING
    assert new["43"].components[0].reason == "BeginTime"
    assert new["41"].components[0].start == 1795400000


def test_sacct_json_of_22_05_and_24_11() -> None:
    old = parse_jobs(json.loads((FIXTURES / "sacct-22.05.json").read_text()), accounting=True)
    failed = old["1"].components
    assert [c.state for c in failed] == [AppState.FAILED, AppState.FAILED]
    # the per-replica truth is the srun step's: a-0 finished, b-0 failed
    assert [c.step_state for c in failed] == [AppState.SUCCEEDED, AppState.FAILED]
    assert [c.state for c in old["6"].components] == [AppState.CANCELLED] * 2
    new = parse_jobs(json.loads((FIXTURES / "sacct-24.11.json").read_text()), accounting=True)
    assert [c.exit_code for c in new["50"].components] == [3, 3]
    assert [c.step_state for c in new["50"].components] == [AppState.SUCCEEDED, AppState.FAILED]
    assert new["60"].components[0].state == AppState.CANCELLED
    assert new["50"].components[0].workdir == "/home/alice/work/jobs/train-x1"


# ---- the real cluster -------------------------------------------------------------------


def test_two_role_heterogeneous_job_runs_with_logs(slurm_env: SlurmCluster) -> None:
    app = specs.AppDef(
        "het",
        roles=[
            _role("a", 'echo "a on $SLURMD_NODENAME rank0=$$${rank0_env}"; echo err-a >&2'),
            _role("b", 'echo "b ${replica_id} job=${app_id}"'),
        ],
    )
    with get_runner() as runner:
        handle = runner.run(app, "slurm", {})
        status = runner.wait(handle, wait_interval=0.5, timeout=90)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        job_id = handle.rsplit("/", 1)[1]
        assert [r.role for r in status.roles] == ["a", "b"]
        a = list(runner.log_lines(handle, "a", 0, streams=Stream.STDOUT))
        assert a == ["a on 127.0.0.1 rank0=127.0.0.1\n"]
        assert list(runner.log_lines(handle, "a", 0, streams=Stream.STDERR)) == ["err-a\n"]
        assert sorted(runner.log_lines(handle, "a", 0)) == sorted([*a, "err-a\n"])
        assert list(runner.log_lines(handle, "b", 0)) == [f"b 0 job={job_id}\n"]
        assert list(runner.log_lines(handle, "a", 0, regex="err")) == ["err-a\n"]
        assert runner.jobstore.get(handle) is not None


def test_cell_on_two_nodes_under_torchrun_in_a_job_dir(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    ws = tmp_path / "home"
    ws.mkdir()
    (ws / "helper.py").write_text("GREETING = 'from the workspace'\n")
    (ws / ".env").write_text("API_TOKEN=s3cr3t\n")
    (ws / ".aws").mkdir()
    (ws / ".aws" / "credentials").write_text("[default]\naws_secret_access_key=x\n")
    (ws / "slurm-1-old-0.out").write_text("an old log\n")
    source = (
        "import os, torch, torch.distributed as dist\n"
        "from helper import GREETING\n"
        "dist.init_process_group('gloo')\n"
        "t = torch.tensor([dist.get_rank() + 1.0])\n"
        "dist.all_reduce(t)\n"
        "print(f'rank {dist.get_rank()} of {dist.get_world_size()} on"
        ' {os.environ["SLURMD_NODENAME"]}: sum {t.item()} {GREETING}\')\n'
        "dist.destroy_process_group()\n"
    )
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    with get_runner() as runner:
        app = runner.component_app(
            "cell", {"source": source, "j": "2x1", "name": "ddp", "memMB": 500}
        )
        handle = runner.run(app, "slurm", {"job_dir": str(jobs)}, workspace=str(ws))
        status = runner.wait(handle, wait_interval=0.5, timeout=180)
        role = app.roles[0].name
        logs = ["".join(runner.log_lines(handle, role, k, streams=Stream.STDOUT)) for k in (0, 1)]
        assert status is not None and status.state == AppState.SUCCEEDED, (status, logs)
    # c10d hands out ranks in arrival order, so either node may be rank 0

    seen = sorted(
        re.findall(r"rank (\d) of 2 on (\S+): sum 3\.0 from the workspace", log)[0] for log in logs
    )
    assert [rank for rank, _ in seen] == ["0", "1"]
    assert logs[0].count("127.0.0.1") == 1 and logs[1].count("127.0.0.2") == 1
    (folder,) = jobs.iterdir()
    assert folder.name.startswith("ddp-")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*")}
    assert "helper.py" in names and "torchx-sbatch.sh" in names
    assert any(n.startswith(".torchx-cell-") for n in names)
    assert not names & {".env", ".aws", ".aws/credentials", "slurm-1-old-0.out"}


def test_failing_job_reports_the_replica_and_exit_code(slurm_env: SlurmCluster) -> None:
    # boom fails after ok has ended: srun's --kill-on-bad-exit would otherwise stop ok (143),
    # and the exit code Slurm reports is the job's highest
    app = specs.AppDef(
        "bad", roles=[_role("ok", "true"), _role("boom", "sleep 1; echo no >&2; exit 3")]
    )
    with get_runner() as runner:
        handle = runner.run(app, "slurm", {})
        status = runner.wait(handle, wait_interval=0.5, timeout=90)
    assert status is not None and status.state == AppState.FAILED
    assert "boom-0: FAILED (exit code 3)" in status.msg
    boom = {r.role: r for r in status.roles}["boom"].replicas[0]
    assert boom.state == AppState.FAILED and boom.hostname == "127.0.0.2"


def test_cancel_and_tail_a_running_job(slurm_env: SlurmCluster) -> None:
    app = specs.AppDef("tail", roles=[_role("r", "for i in 1 2 3; do echo line $i; sleep 1; done")])
    with get_runner() as runner:
        handle = runner.run(app, "slurm", {})
        lines = list(runner.log_lines(handle, "r", 0, should_tail=True))
        assert lines == ["line 1\n", "line 2\n", "line 3\n"]
        assert runner.wait(handle, wait_interval=0.5, timeout=30).state == AppState.SUCCEEDED  # type: ignore[union-attr]
        handle = runner.run(specs.AppDef("long", roles=[_role("r", "sleep 300")]), "slurm", {})
        wait_for(lambda: runner.status(handle).state == AppState.RUNNING, timeout=60)  # type: ignore[union-attr]
        runner.cancel(handle)
        status = runner.wait(handle, wait_interval=0.5, timeout=60)
    assert status is not None and status.state == AppState.CANCELLED


def _scancels(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The Slurm commands cancel.py runs, as they are run (recorded, then run for real)."""
    from torchx_nb.schedulers.slurm import cancel, commands

    calls: list[list[str]] = []
    real = commands.run_slurm

    def recording(argv: list[str], env: object = None) -> str:
        if argv[0] == "scancel":
            calls.append(argv)
        return real(argv, env)  # type: ignore[arg-type]

    monkeypatch.setattr(cancel, "run_slurm", recording)
    return calls


def test_a_cancel_gives_the_program_its_sigterm_and_time_to_end_on_it(
    slurm_env: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running job's cancel signals its batch script alone; the script hands SIGTERM to the
    program and ends the job CANCELLED once it has ended (a plain scancel also gave srun
    SIGTERM, and srun SIGKILLed the program at once: it never said "saved")."""
    calls = _scancels(monkeypatch)
    program = (
        "trap 'echo got SIGTERM; sleep 2; echo saved; exit 143' TERM; echo ready; sleep 300 & wait"
    )
    with get_runner() as runner:
        handle = runner.run(specs.AppDef("term", roles=[_role("r", program)]), "slurm", {})
        wait_for(lambda: "ready" in "".join(runner.log_lines(handle, "r", 0)), timeout=60)
        runner.cancel(handle)
        status = runner.wait(handle, wait_interval=0.5, timeout=60)
        log = "".join(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))
    assert status is not None and status.state == AppState.CANCELLED, status
    assert status.msg == "it was cancelled by root (uid 0)", status
    (replica,) = status.roles[0].replicas  # exit 143: ended on SIGTERM, as Slurm says FAILED
    assert (replica.state, replica.exit_code) == (AppState.CANCELLED, 143), replica
    assert log == "ready\ngot SIGTERM\nsaved\n"
    job = handle.rsplit("/", 1)[1]
    assert calls == [["scancel", "--batch", "--signal=TERM", job]]  # the script ended it


def test_a_program_that_ignores_sigterm_is_cancelled_after_the_grace(
    slurm_env: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program that never ends on the cancel's SIGTERM: after ``GRACE_S`` the plain
    scancel ends the job CANCELLED."""
    from torchx_nb.schedulers.slurm import cancel

    calls = _scancels(monkeypatch)
    monkeypatch.setattr(cancel, "GRACE_S", 3.0)
    program = "trap '' TERM; echo ready; sleep 300"
    with get_runner() as runner:
        handle = runner.run(specs.AppDef("deaf", roles=[_role("r", program)]), "slurm", {})
        wait_for(lambda: "ready" in "".join(runner.log_lines(handle, "r", 0)), timeout=60)
        began = time.monotonic()
        runner.cancel(handle)
        took = time.monotonic() - began
        status = runner.wait(handle, wait_interval=0.5, timeout=60)
    assert status is not None and status.state == AppState.CANCELLED, status
    job = handle.rsplit("/", 1)[1]
    assert calls == [["scancel", "--batch", "--signal=TERM", job], ["scancel", job]]
    assert took >= 3.0


def test_failed_job_is_requeued_up_to_max_retries(slurm_env: SlurmCluster) -> None:
    app = specs.AppDef(
        "retry",
        roles=[
            _role(
                "r",
                'echo "run ${SLURM_RESTART_COUNT:-0}"; [ "${SLURM_RESTART_COUNT:-0}" -ge 1 ]',
                max_retries=1,
            )
        ],
    )
    with get_runner() as runner:
        handle = runner.run(app, "slurm", {})
        job = handle.rsplit("/", 1)[1]

        def requeued() -> AppStatus | None:
            # Slurm records the pending reason on its next scheduling pass, a moment after the
            # requeue: wait until there is one
            s = runner.status(handle)
            ok = s is not None and s.state == AppState.PENDING and s.num_restarts == 1
            return s if ok and s.msg != specs.NONE else None  # type: ignore[union-attr]

        status = wait_for(requeued, timeout=120)  # type: ignore[assignment]
        assert status.msg.startswith("requeued: Slurm holds it until ")
        assert status.msg.endswith(
            " (BeginTime, about 2 minutes after each requeue), then it starts again"
        )
        # Slurm makes a requeued batch job eligible only ~2 minutes later (as on any cluster);
        # the test lets it start now instead of waiting
        slurm_env.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        status = runner.wait(handle, wait_interval=0.5, timeout=240)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        assert status.num_restarts == 1
        assert list(runner.log_lines(handle, "r", 0)) == ["run 1\n"]


def test_finished_jobs_come_from_sacct_and_list(slurm_env: SlurmCluster) -> None:
    sched = SlurmScheduler("torchx")
    with get_runner() as runner:
        handle = runner.run(specs.AppDef("acct", roles=[_role("r", "true")]), "slurm", {})
        runner.wait(handle, wait_interval=0.5, timeout=60)
    job = handle.rsplit("/", 1)[1]
    # what describe does once squeue has forgotten the job: one sacct call
    finished = sched._sacct([job])
    assert finished is not None
    assert combined_state(c.state for c in finished[job].components) == AppState.SUCCEEDED
    # slurmdbd may list a job a moment after it answers for it by id
    rows: dict[str, ListAppResponse] = wait_for(  # type: ignore[assignment]
        lambda: {r.app_id: r for r in sched.list() if r.app_id == job}, timeout=30
    )
    assert rows[job].state == AppState.SUCCEEDED and rows[job].name == "acct"
    code, out, err = cli("list", "-s", "slurm")
    assert code == 0, err
    assert f"slurm://torchx/{job}" in out


def test_without_accounting_list_falls_back_to_the_queue(
    slurm_cluster_noacct: SlurmCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster_noacct.conf))
    sched = SlurmScheduler("torchx")
    with get_runner() as runner:
        handle = runner.run(specs.AppDef("q", roles=[_role("r", "sleep 60")]), "slurm", {})
        job = handle.rsplit("/", 1)[1]
        with pytest.warns(UserWarning, match="accounting is off"):
            rows = sched.list()
        assert [r.app_id for r in rows] == [job]
        assert sched._sacct([job]) is None
        runner.cancel(handle)


def test_describe_many_is_one_squeue_call(
    slurm_env: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    for tool in ("squeue", "sacct"):
        real = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        shim = tmp_path / tool
        shim.write_text(f'#!/bin/sh\necho {tool} >> {calls}\nexec {real} "$@"\n')
        shim.chmod(0o755)
    with get_runner() as runner:
        handles = [
            runner.run(specs.AppDef(f"m{i}", roles=[_role("r", "sleep 60")]), "slurm", {})
            for i in range(3)
        ]
        monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
        statuses = runner.status_many(handles)
        assert all(s is not None and not s.is_terminal() for s in statuses.values())
        assert calls.read_text().split() == ["squeue"]
        for h in handles:
            runner.cancel(h)


# ---- one clear line for each mistake ----------------------------------------------------


def test_no_sbatch_on_path_is_one_line(tmp_path: Path) -> None:
    code, _, err = cli("run", "-s", "slurm", "utils.echo", env={"PATH": str(tmp_path)})
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "torchx-nb: error: sbatch is not on PATH: run this on a Slurm login node, or add Slurm's bin"
        " folder to PATH"
    )


def test_controller_that_does_not_answer_is_one_line(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    from tests.infra.dockerd import free_port

    conf = tmp_path / "slurm.conf"
    text = slurm_cluster.conf.read_text()
    port = next(ln for ln in text.splitlines() if ln.startswith("SlurmctldPort="))
    conf.write_text(text.replace(port, f"SlurmctldPort={free_port()}"))
    t0 = time.monotonic()
    code, _, err = cli(
        "run", "-s", "slurm", "utils.echo", env={"SLURM_CONF": str(conf)}, timeout=120
    )
    assert code == 1, err
    (line,) = err.strip().splitlines()
    assert "the Slurm controller does not answer" in line and "scontrol ping" in line
    assert time.monotonic() - t0 < 110


def test_unknown_partition_is_one_line_and_nothing_is_stored(slurm_env: SlurmCluster) -> None:
    code, _, err = cli("run", "-s", "slurm", "-cfg", "partition=nope", "utils.echo")
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith(
        "torchx-nb: error: Slurm refused the job: invalid partition specified: nope"
    )
    assert "sinfo -s" in line
    assert get_runner().jobstore.list() == []


def test_unwritable_job_dir_is_one_line_before_anything(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = cli("run", "-s", "slurm", "-cfg", f"job_dir={blocker}/jobs", "utils.echo")
    assert code == 1
    assert err.strip() == f"torchx-nb: error: job_dir '{blocker}/jobs': {blocker} is not a folder"
    code, _, err = cli("run", "-s", "slurm", "-cfg", "job_dir=/proc/torchx-jobs", "utils.echo")
    assert code == 1
    (line,) = err.strip().splitlines()
    assert "/proc/torchx-jobs" in line and "choose a job_dir you can write" in line
    out = slurm_env.run("squeue", "-h", "-n", "echo-0").stdout
    assert out.strip() == ""


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"partition": "debug\nrm -rf ~"}, "partition='debug\\nrm -rf ~' holds a space or line"),
        ({"account": "lab --wrap=x"}, "account='lab --wrap=x' holds a space or line break"),
        ({"comment": "two words\nid"}, "comment='two words\\nid' holds a space or line"),
    ],
)
def test_hostile_options_cannot_add_script_lines(cfg: dict[str, str], message: str) -> None:
    app = specs.AppDef("h", roles=[_role("a", "true")])
    with pytest.raises(ValueError) as info:
        get_runner().dryrun(app, "slurm", cfg)
    assert message in str(info.value)
    fine = get_runner().dryrun(app, "slurm", {"comment": "two words"})
    assert "# Run with: sbatch --parsable '--comment=two words'\n" in fine.request.materialize()
    app.roles[0].name = "a;b"  # role names reach job names and file names: the Runner checks
    with pytest.raises(specs.TorchxNbError, match="role name 'a;b' is not allowed"):
        get_runner().dryrun(app, "slurm", {})


def test_each_replica_knows_its_id(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each heterogeneous component's srun sets TORCHX_REPLICA_ID (its rank's checkpoint
    folder, where no torchrun sets $RANK); a role's own value is kept."""
    monkeypatch.setenv("PATH", "/nonexistent")
    app = specs.AppDef("ids", roles=[_role("a", "true", replicas=2), _role("b", "true")])
    app.roles[1].env = {"TORCHX_REPLICA_ID": "7"}
    assert re.findall(r"TORCHX_REPLICA_ID=(\d+)", _script(app)) == ["0", "1", "7"]


def test_an_empty_option_is_the_option_left_out() -> None:
    """``-cfg time=`` (a value emptied in .torchxconfig or a script's variable left unset) is
    no limit given, as the request writes it; it read as 'holds a space or line break'."""
    code, out, err = cli(
        "run", "-s", "slurm", "--dryrun", "--json", "-cfg", "time=,partition=", "utils.echo"
    )
    assert code == 0, err
    assert "#SBATCH --job-name=echo-0 " in out
    assert "--time" not in out and "--partition" not in out


def test_hostile_handles_are_refused() -> None:
    sched = SlurmScheduler("torchx")
    for bad in ("1;rm -rf /", "../1", "", "1 2"):
        with pytest.raises(ValueError, match="is not a Slurm job id"):
            sched.describe(bad)
    with pytest.raises(ValueError, match="is not a role"):
        list(sched.log_iter("1", "../../etc/passwd"))


def test_cell_results_and_outputs_from_the_job_folder_and_in_place(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    """With job_dir the outputs live in the job folder; in place, in the workspace's hidden
    outputs folder with the cell runner's files (on the shared filesystem, shipped by nothing)."""
    from tests.result_checks import (
        RAISE_CELL,
        RESULT_CELL,
        assert_raises_remotely,
        assert_round_trip,
        result_workspace,
    )
    from torchx_nb.components.cell import cell

    ws = result_workspace(tmp_path)
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    with get_runner() as runner:
        copied = runner.run(
            cell(source=RESULT_CELL, memMB=500), "slurm", {"job_dir": str(jobs)}, str(ws)
        )
        in_place = runner.run(cell(source=RAISE_CELL, memMB=500), "slurm", {}, str(ws))
        assert_round_trip(runner, copied, tmp_path / "dl")
        assert_raises_remotely(runner, in_place)
        rec = runner.jobstore.get(copied)
        assert rec is not None and rec.outputs
        assert rec.outputs.startswith(f"file://{jobs}/")
    hidden = ws / ".torchx-nb-outputs"
    others = {p.name for p in ws.iterdir()} - {".torchx-nb-outputs", "tnb_wsmod.py"}
    assert hidden.is_dir() and all(n.startswith("slurm-") for n in others), others
    assert stat.S_IMODE((hidden / "cells").stat().st_mode) == 0o700
    from torchx_nb.workspace.collect import collect_workspace

    assert not [f.path for f in collect_workspace(str(ws)).files if "torchx-nb" in f.path]


def test_cancel_all_is_one_scancel_of_the_array(
    slurm_env: SlurmCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's Cancel all: one ``scancel ARRAYID``; the trial that had ended keeps its end,
    the others are CANCELLED, running or still pending."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.schedulers.slurm import arrays, commands, scheduler
    from torchx_nb.sweeps import SweepRequest, start

    ws = tmp_path / "ws"
    ws.mkdir()
    source = "import time\nif n > 0:\n    time.sleep(120)\nn\n"
    request = SweepRequest(
        RunRequest(cell=source, scheduler="slurm", workspace=str(ws)),
        ["n=0,1,2,3"],
        max_parallel=2,
    )
    calls: list[list[str]] = []
    real = commands.run_slurm

    def counting(argv: list[str], env: object = None) -> str:
        calls.append(argv)
        return real(argv, env)  # type: ignore[arg-type]

    for module in (scheduler, arrays):  # every caller of Slurm's commands
        monkeypatch.setattr(module, "run_slurm", counting)
    with get_runner() as runner:
        sw = start(runner, request)
        assert sw.array
        h = sw.handles
        wait_for(lambda: runner.status(h[0]).state == AppState.SUCCEEDED, 60)  # type: ignore[arg-type,union-attr]
        wait_for(lambda: runner.status(h[1]).state == AppState.RUNNING, 60)  # type: ignore[arg-type,union-attr]
        calls.clear()
        sw.cancel()
        assert [c for c in calls if c[0] == "scancel"] == [
            ["scancel", h[0].rsplit("/", 1)[1].split("_")[0]]
        ]  # type: ignore[union-attr]
        statuses = sw.wait(timeout=60)
        assert [s.state if s else None for s in statuses] == [
            AppState.SUCCEEDED,
            AppState.CANCELLED,
            AppState.CANCELLED,
            AppState.CANCELLED,
        ], statuses


def test_a_sweep_is_one_job_array_with_a_handle_per_task(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    """``%%torchx sweep`` on Slurm: one sbatch with ``--array`` (sacct shows one array), each
    trial ``ARRAYID_INDEX`` with its own state, log, result and cancel."""
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import Sweep, SweepRequest, start

    ws = tmp_path / "ws"
    ws.mkdir()
    source = (
        "import os, time\n"
        "print('trial', os.environ['TORCHX_PARAM_LR'], 'layers', layers, flush=True)\n"
        "if lr == 0.5 and layers == 2:\n"
        "    time.sleep(120)\n"
        "if layers == 3:\n"
        "    raise ValueError(f'no {layers} layers')\n"
        "{'lr': lr, 'score': lr * layers}\n"
    )
    request = SweepRequest(
        RunRequest(cell=source, scheduler="slurm", workspace=str(ws)),
        ["lr=0.1,0.5", "layers=2,3"],
        max_parallel=4,
    )
    with get_runner() as runner:
        sw = start(runner, request)
        assert sw.array
        handles = sw.handles
        array_id = handles[0].rsplit("/", 1)[1].split("_")[0]  # type: ignore[union-attr]
        assert [h.rsplit("/", 1)[1] for h in handles] == [  # type: ignore[union-attr]
            f"{array_id}_{i}" for i in range(4)
        ]
        # the long trial (lr=0.5, layers=2) is cancelled alone; the others run to their end
        wait_for(lambda: runner.status(handles[2]).state == AppState.RUNNING, 60)  # type: ignore[arg-type,union-attr]
        runner.cancel(handles[2])  # type: ignore[arg-type]
        statuses = sw.wait(timeout=120)
        states = [s.state if s else None for s in statuses]
        assert states == [
            AppState.SUCCEEDED,
            AppState.FAILED,
            AppState.CANCELLED,
            AppState.FAILED,
        ], statuses
        logs = "".join(runner.log_lines(handles[0], "cell", 0))  # type: ignore[arg-type]
        assert "trial 0.1 layers 2" in logs
        frame = sw.results()
        assert frame["result"][0] == {"lr": 0.1, "score": 0.2}
        assert frame["error"][1] == "raised ValueError: no 3 layers"
        assert list(frame["state"]) == ["SUCCEEDED", "FAILED", "CANCELLED", "FAILED"]
        assert sw.best("score")["lr"] == 0.1
        # a new process finds the sweep in the job store
        again = Sweep.attach(runner, sw.id)
        assert again.handles == handles and again.points == sw.points
    # one sbatch: sacct shows the tasks of one array
    out = subprocess.run(
        ["sacct", "-n", "-X", "-j", array_id, "--format=JobID%20"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert sorted(out) == [f"{array_id}_{i}" for i in range(4)]


def test_why_a_job_waits_is_said_in_words_with_the_next_step(slurm_env: SlurmCluster) -> None:
    """A job held by an administrator, then one queued behind exclusive jobs on every node:
    Slurm's reason codes become words and the next step (the code stays in the text)."""
    blockers = fill_every_node(slurm_env, 120)
    try:
        with get_runner() as runner:
            handle = runner.run(shell_app("true", "", name="queued"), "slurm", {})
            job = handle.rsplit("/", 1)[1]

            def reason() -> str | None:
                s = runner.status(handle)
                msg = s.msg if s is not None and s.state == AppState.PENDING else ""
                return msg if msg and msg != specs.NONE else None

            said = wait_for(reason, timeout=60)
            assert said in (
                "pending (Resources): the nodes, CPUs, memory or GPUs it asks for are in use by"
                " other jobs; it starts when they free up",
                "pending (Priority): jobs of higher priority wait ahead of it in the partition;"
                " it starts after them",
            ), said
            slurm_env.run("scontrol", "hold", job)
            held = wait_for(lambda: (reason() or "").startswith("pending (JobHeld") or None, 30)
            assert held
            assert runner.status(handle).msg == (  # type: ignore[union-attr]
                "pending (JobHeldAdmin): an administrator holds it; it will not start until"
                f" released: ask an administrator to `scontrol release {job}`"
            )
            runner.cancel(handle)
    finally:
        slurm_env.run("scancel", *blockers, check=False)


def test_every_slurm_reason_reads_as_words() -> None:
    from torchx_nb.schedulers.slurm.reasons import pending_reason

    assert pending_reason("JobHeldUser", "12") == (
        "pending (JobHeldUser): it is held (by you, or held at submit); release it with"
        " `scontrol release 12`"
    )
    assert pending_reason("QOSMaxJobsPerUserLimit", "3").startswith(
        "pending (QOSMaxJobsPerUserLimit): a limit of its QOS holds it"
    )
    assert "association" in pending_reason("AssocGrpCpuLimit", "3")
    assert "can never start" in pending_reason("PartitionTimeLimit", "3")
    assert pending_reason("SomethingNew", "7") == (
        "pending: SomethingNew (Slurm's reason; `scontrol show job 7` says more)"
    )


def test_phases_split_queue_and_run_from_slurms_own_times(slurm_env: SlurmCluster) -> None:
    """A job queued behind exclusive jobs on every node: its queue time and run time come from
    Slurm's start and end times, in job.phases() and in the job list."""
    from torchx_nb.joblist import job_rows
    from torchx_nb.notebook.handle import JobHandle

    blockers = fill_every_node(slurm_env, 6)
    try:
        with get_runner() as runner:
            handle = runner.run(shell_app("sleep 2", "", name="phased"), "slurm", {})
            status = runner.wait(handle, wait_interval=0.5, timeout=120)
            assert status is not None and status.state == AppState.SUCCEEDED
            frame = JobHandle(handle, runner).phases()
            assert list(frame["phase"]) == ["queued", "running"]
            queued, ran = frame["seconds"]
            assert queued >= 2 and 1.5 <= ran <= 30, frame
            assert frame["end"].iloc[0] == frame["start"].iloc[1]
            (row,) = [r for r in job_rows(runner, refresh=False) if r["handle"] == handle]
            assert row["queued"] == queued and row["ran"] == ran
    finally:
        slurm_env.run("scancel", *blockers, check=False)


def fill_every_node(cluster: SlurmCluster, seconds: int) -> list[str]:
    """An exclusive job on each of the cluster's two nodes, sleeping ``seconds``: what comes
    next waits behind them. Their ids, to scancel."""
    return [
        cluster.run(
            "sbatch", "--parsable", "--exclusive", "-N1", "--wrap", f"sleep {seconds}"
        ).stdout.strip()
        for _ in range(2)
    ]


@pytest.mark.parametrize(
    ("replicas", "cpus", "why"),
    [
        (5, 1, "it needs 5 nodes (one per replica) and the partition debug has 2"),
        (1, 64, "a replica asks for 64 CPUs and the largest node of debug has 2"),
    ],
)
def test_a_job_that_can_never_start_says_so(
    slurm_env: SlurmCluster, replicas: int, cpus: int, why: str
) -> None:
    """sbatch accepts both and Slurm says only Resources; the partition's nodes say why it
    can never start."""
    app = shell_app("true", "", name="huge")
    app.roles[0].num_replicas = replicas
    app.roles[0].resource = specs.Resource(cpu=cpus, gpu=0, memMB=64)
    with get_runner() as runner:
        handle = runner.run(app, "slurm", {})
        try:

            def said() -> str | None:
                s = runner.status(handle)
                msg = s.msg if s is not None and s.state == AppState.PENDING else ""
                return msg if "never start" in msg else None

            msg = wait_for(said, 30)
            assert msg.startswith(f"pending: it can never start: {why} (Slurm says "), msg
            assert msg.endswith("; ask for less, or pick another -cfg partition")
        finally:
            runner.cancel(handle)


def test_the_partition_fit_reads_sinfo() -> None:
    from torchx_nb.schedulers.slurm.fit import never_fits, parse_sinfo, replica_needs

    text = "n1|gpu*|8|64000|gpu:a100:2\nn2|gpu*|8|64000|gpu:a100:2\nc1|cpu|32|128000|(null)\n"
    name, nodes = parse_sinfo(text, None)
    assert name == "gpu" and [n.gpus for n in nodes] == [2, 2]
    need = replica_needs({"cpus-per-task": "4", "mem": "1000", "gpus-per-node": "4"})
    assert never_fits([need], name, nodes) == (
        "a replica asks for 4 GPUs and the largest node of gpu has 2"
    )
    assert never_fits([replica_needs({"cpus-per-task": "16"})], *parse_sinfo(text, "cpu")) is None


def test_out_of_memory_from_slurm_marks_the_replica() -> None:
    """sacct's OUT_OF_MEMORY marks the replica and its failure card (a recorded state: the
    private cluster runs without cgroups, so nothing there is killed for its memory)."""
    from torchx_nb.schedulers.slurm.jobs import Component, Job
    from torchx_nb.specs.failure import FailureCard

    job = Job(
        7,
        [
            Component(
                job_id=7,
                offset=0,
                name="trainer-0",
                state=AppState.FAILED,
                state_text="OUT_OF_MEMORY",
                exit_code=137,
            )
        ],
    )
    resp = SlurmScheduler("torchx")._response("7", job)
    (replica,) = resp.roles_statuses[0].replicas
    assert replica.oom and replica.exit_code == 137
    card = FailureCard("trainer", 0, replica.exit_code, replica.oom)
    assert card.headline() == "trainer/0 ran out of memory (exit code 137, SIGKILL)"


def test_a_notebook_runs_as_a_slurm_job_in_place_and_from_a_job_dir(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    """A notebook job on the real cluster: its sibling module imports, its parameters are
    injected, and the executed notebook comes back from the job folder and from in place;
    a failing cell fails the job and names itself."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from torchx_nb.notebook.notebook_jobs import run_notebook

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "helper.py").write_text("def double(x):\n    return 2 * x\n")
    cells = [
        new_code_cell("n = 1", metadata={"tags": ["parameters"]}),
        new_code_cell("from helper import double\nprint('slurm', double(n))"),
    ]
    nbformat.write(new_notebook(cells=cells), ws / "nb.ipynb")
    nbformat.write(new_notebook(cells=[new_code_cell("raise KeyError('k')")]), ws / "bad.ipynb")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    with get_runner() as runner:
        copied = run_notebook(
            ws / "nb.ipynb",
            {"n": 4},
            scheduler="slurm",
            cfg={"job_dir": str(jobs)},
            runner=runner,
        )
        in_place = run_notebook(ws / "nb.ipynb", {"n": 5}, scheduler="slurm", runner=runner)
        bad = run_notebook(ws / "bad.ipynb", scheduler="slurm", runner=runner)
        hostile = ws / "a b'; touch PWNED; $(touch PWNED2).ipynb"  # into the sbatch script
        hostile.write_bytes((ws / "nb.ipynb").read_bytes())
        odd = run_notebook(hostile, {"n": 6}, scheduler="slurm", runner=runner)
        for job, n in ((copied, 8), (in_place, 10), (odd, 12)):
            status = job.wait(timeout=120, interval=0.5)
            assert status is not None and status.state == AppState.SUCCEEDED, status
            nb = nbformat.read(job.notebook(tmp_path / "back"), 4)
            assert nb.cells[2].outputs[0].text == f"slurm {n}\n"
        status = bad.wait(timeout=120, interval=0.5)
        assert status is not None and status.state == AppState.FAILED, status
        (card,) = runner.failure_cards(bad.handle, status, lines=0)
        assert card.exception == "KeyError in cell 1 (\"raise KeyError('k')\"): 'k'"
    assert not (ws / "PWNED").exists() and not (ws / "PWNED2").exists()


@pytest.mark.parametrize("state", [AppState.RUNNING, AppState.SUCCEEDED])
def test_a_running_job_whose_step_has_no_log_file_yet_has_no_lines(
    tmp_path: Path, state: AppState
) -> None:
    """The job is RUNNING from its batch script's start; the srun step makes its log files a
    moment later (longer under load). A log read in between has no lines (it raised 'is the
    job's folder on a filesystem this machine sees?', which failed the cancelled-notebook test
    below under parallel CI); once the job ended, no file is that error."""
    from torchx_nb.schedulers.api import DescribeAppResponse
    from torchx_nb.schedulers.slurm import SlurmScheduler

    class Logs(SlurmScheduler):  # its log part, with the job's folder and state given
        def _workdir(self, app_id: str) -> str:
            return str(tmp_path)

        def describe(self, app_id: str) -> DescribeAppResponse | None:
            return DescribeAppResponse(app_id=app_id, state=state)

    logs = Logs("test")
    paths = logs._log_paths("40", "notebook", 0, None)
    if state == AppState.RUNNING:
        assert list(logs._follow("40", paths, should_tail=False)) == []
    else:
        with pytest.raises(FileNotFoundError, match="no log file slurm-40-notebook-0.out"):
            list(logs._follow("40", paths, should_tail=False))


def test_a_cancelled_notebook_job_is_cancelled_with_one_clean_line(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    """A cancel on the real cluster gives the runner the time to end on it: the job is
    CANCELLED (Slurm's "by" kept), its log ends with the runner's own line naming the cell,
    and the executed notebook is saved with the cells run so far — a plain scancel made srun
    SIGKILL the runner at once (no line, the cancelled cell's output never saved)."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from torchx_nb.notebook.notebook_jobs import run_notebook

    ws = tmp_path / "ws"
    ws.mkdir()
    cells = [
        new_code_cell("print('first done')"),
        new_code_cell("import time\nprint('second began', flush=True)\ntime.sleep(90)"),
    ]
    nbformat.write(new_notebook(cells=cells), ws / "long.ipynb")
    with get_runner() as runner:
        job = run_notebook(ws / "long.ipynb", scheduler="slurm", runner=runner)
        wait_for(lambda: "second began" in job.logs(), 120, interval=0.5)
        job.cancel()
        status = job.wait(timeout=60, interval=0.5)
        assert status is not None and status.state == AppState.CANCELLED, status
        assert status.msg == "it was cancelled by root (uid 0)", status
        (replica,) = status.roles[0].replicas
        assert replica.state == AppState.CANCELLED, replica
        log = job.logs()
        executed = nbformat.read(job.notebook(tmp_path / "got"), 4)
    assert log.splitlines()[-1] == (
        "torchx_nb: stopped during cell 2 ('import time') by SIGTERM (a cancel or a preemption:"
        " the job's status says which): the notebook is saved as far as it ran"
    ), log
    assert "Traceback" not in log and "died" not in log
    assert "AssertionError" not in log and "DeadKernelError" not in log
    outputs = [[o.get("text") for o in c.outputs] for c in executed.cells]
    assert outputs == [["first done\n"], ["second began\n"]], outputs
    # sacct: the job CANCELLED, by whom Slurm says (the script's own scancel: the same user)
    acct = slurm_env.run(
        "sacct", "-n", "-X", "-j", job.handle.rsplit("/", 1)[1], "--parsable2", "-o", "State"
    )
    assert acct.stdout.strip() == "CANCELLED by 0", acct.stdout


def test_a_notebook_sweep_is_one_job_array_each_task_its_own_notebook(
    slurm_env: SlurmCluster, tmp_path: Path
) -> None:
    """``torchx-nb sweep --notebook``: one ``--array`` job; each task picks its point, runs
    the notebook with it injected over the run's own values, and keeps its executed notebook
    in its own output folder."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from torchx_nb.notebook.handle import JobHandle
    from torchx_nb.runner import RunRequest
    from torchx_nb.sweeps import SweepRequest, start

    ws = tmp_path / "ws"
    ws.mkdir()
    cells = [
        new_code_cell("lr = 0.0\nname = 'base'", metadata={"tags": ["parameters"]}),
        new_code_cell("print(name, lr * 10)"),
    ]
    nbformat.write(new_notebook(cells=cells), ws / "train.ipynb")
    request = SweepRequest(
        RunRequest(
            run_notebook=str(ws / "train.ipynb"), parameters={"name": "swept"}, scheduler="slurm"
        ),
        ["lr=0.1,0.2"],
    )
    with get_runner() as runner:
        sw = start(runner, request)
        assert sw.array
        statuses = sw.wait(timeout=120)
        assert [s.state if s else None for s in statuses] == [AppState.SUCCEEDED] * 2
        texts = []
        for i, handle in enumerate(sw.handles):
            assert handle is not None
            path = JobHandle(handle, runner).notebook(tmp_path / f"t{i}")
            texts.append(nbformat.read(path, 4).cells[2].outputs[0].text)
    assert texts == ["swept 1.0\n", "swept 2.0\n"]
