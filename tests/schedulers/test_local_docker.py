"""local_docker against a real dockerd, with locally built base images and host networking."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import shell_app, wait_for
from tests.infra.dockerd import DockerDaemon
from torchx_nb import specs
from torchx_nb.runner import get_runner
from torchx_nb.schedulers.local_docker import (
    LABEL_APP_ID,
    LocalDockerScheduler,
    container_name,
)
from torchx_nb.specs import AppState
from torchx_nb.specs.log_line import Stream


def app(
    image: str, *args: str, n: int = 1, entrypoint: str = "sh", **role_kw: object
) -> specs.AppDef:
    return specs.AppDef(
        "dk",
        roles=[
            specs.Role(
                "r", image, entrypoint=entrypoint, args=list(args), num_replicas=n, **role_kw
            )
        ],
    )  # type: ignore[arg-type]


@pytest.fixture
def sched(docker_env: DockerDaemon) -> LocalDockerScheduler:
    return LocalDockerScheduler("torchx", docker_client=docker_env.client())


def run(s: LocalDockerScheduler, a: specs.AppDef, **cfg: object) -> str:
    return s.schedule(s.submit_dryrun(a, {"network": "host", **cfg}))


def wait_state(s: LocalDockerScheduler, app_id: str, timeout: float = 60) -> AppState:
    return wait_for(  # type: ignore[return-value]
        lambda: (d := s.describe(app_id)) and specs.is_terminal(d.state) and d.state, timeout
    )


def test_two_replicas_names_labels_env_and_logs(
    sched: LocalDockerScheduler, base_images: dict[str, str]
) -> None:
    a = app(
        base_images["busybox"],
        "-c",
        'echo "rank0=$TORCHX_RANK0_HOST rep=$REP/$TORCHX_REPLICA_ID id=$TORCHX_APP"; echo err >&2',
        n=2,
        env={"REP": specs.macros.replica_id, "TORCHX_APP": specs.macros.app_id},
        resource=specs.Resource(cpu=1, gpu=0, memMB=128),
    )
    app_id = run(sched, a)
    assert wait_state(sched, app_id) == AppState.SUCCEEDED
    containers = sched._containers(app_id)
    assert sorted(c.name for c in containers) == [container_name(app_id, "r", i) for i in (0, 1)]
    c0 = next(c for c in containers if c.labels["torchx.pytorch.org/replica-id"] == "0")
    assert c0.labels[LABEL_APP_ID] == app_id and c0.labels["torchx.pytorch.org/role-name"] == "r"
    host_config = c0.attrs["HostConfig"]
    assert host_config["Memory"] == 128 * 1024 * 1024 and host_config["NanoCpus"] == 10**9
    assert host_config["ShmSize"] == 128 * 1024 * 1024 and host_config["NetworkMode"] == "host"
    out1 = list(sched.log_iter(app_id, "r", 1, streams=Stream.STDOUT))
    assert out1 == [f"rank0=localhost rep=1/1 id={app_id}\n"]
    assert list(sched.log_iter(app_id, "r", 0, streams=Stream.STDERR)) == ["err\n"]
    assert len(list(sched.log_iter(app_id, "r", 0))) == 2
    assert list(sched.log_iter(app_id, "r", 0, regex="^rank")) == [
        f"rank0=localhost rep=0/0 id={app_id}\n"
    ]
    desc = sched.describe(app_id)
    assert desc is not None and desc.roles[0].name == "r" and desc.roles[0].num_replicas == 2


def test_failure_cancel_tail_and_list(
    sched: LocalDockerScheduler, base_images: dict[str, str]
) -> None:
    failed = run(sched, app(base_images["busybox"], "-c", "exit 3"))
    assert wait_state(sched, failed) == AppState.FAILED
    assert "r/0 exited with code 3" in sched.describe(failed).msg  # type: ignore[union-attr]
    slow = run(
        sched, app(base_images["busybox"], "-c", "for i in 1 2 3; do echo tick$i; sleep 0.3; done")
    )
    tailed = list(sched.log_iter(slow, "r", should_tail=True))
    assert tailed == ["tick1\n", "tick2\n", "tick3\n"]
    sleeper = run(sched, app(base_images["busybox"], "-c", "sleep 60"))
    wait_for(lambda: sched.describe(sleeper).state == AppState.RUNNING)  # type: ignore[union-attr]
    sched.cancel(sleeper)
    assert wait_state(sched, sleeper) == AppState.CANCELLED
    listed = {x.app_id: x.state for x in sched.list()}
    assert listed[failed] == AppState.FAILED and listed[sleeper] == AppState.CANCELLED
    assert sched.describe("nope-123") is None


def test_mounts_and_retries(
    sched: LocalDockerScheduler, base_images: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "in.txt").write_text("mounted")
    a = app(
        base_images["busybox"],
        "-c",
        "cat /data/in.txt",
        max_retries=2,
        mounts=specs.parse_mounts(["type=bind", f"src={tmp_path}", "dst=/data", "readonly"]),
    )
    info = sched.submit_dryrun(a, {"network": "host"})
    kw = info.request.containers[0].kwargs
    assert kw["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": 2}
    app_id = sched.schedule(info)
    assert wait_state(sched, app_id) == AppState.SUCCEEDED
    assert "".join(sched.log_iter(app_id, "r")) == "mounted"


def test_runner_end_to_end_from_another_process(
    docker_env: DockerDaemon, base_images: dict[str, str]
) -> None:
    with get_runner() as runner:
        handle = runner.run(
            app(
                base_images["python"],
                "-c",
                "import os; print(os.environ['TORCHX_JOB_ID'])",
                entrypoint="python",
            ),
            "local_docker",
            {"network": "host"},
        )
        assert runner.wait(handle, wait_interval=0.2).state == AppState.SUCCEEDED  # type: ignore[union-attr]
    code = (
        f"from torchx_nb.runner import get_runner; r = get_runner(); "
        f"print(r.status({handle!r}).state); print(''.join(r.log_lines({handle!r}, 'r')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**__import__("os").environ, **docker_env.env},
    )
    assert out.stdout.split("\n")[:2] == ["SUCCEEDED", handle]


def test_no_daemon_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(specs.TorchxNbError, match="no Docker daemon answers.*builder=registry"):
        LocalDockerScheduler("torchx").client  # noqa: B018


def test_missing_image_is_a_clear_error(sched: LocalDockerScheduler) -> None:
    with pytest.raises(specs.TorchxNbError, match="is not on this Docker daemon"):
        run(sched, app("127.0.0.1:1/nothing/here:1", "-c", "true"))


def test_named_devices_become_device_files_as_in_torchx() -> None:
    from torchx_nb.specs.named_resources_aws import EFA_DEVICE, NEURON_DEVICE

    sched = LocalDockerScheduler("torchx", docker_client=object())
    res = specs.Resource(cpu=1, gpu=0, memMB=64, devices={EFA_DEVICE: 2, NEURON_DEVICE: 1})
    info = sched.submit_dryrun(app("img", "-c", "true", resource=res), {})
    assert info.request.containers[0].kwargs["devices"] == [
        "/dev/infiniband/uverbs0:/dev/infiniband/uverbs0:rwm",
        "/dev/infiniband/uverbs1:/dev/infiniband/uverbs1:rwm",
        "/dev/neuron0:/dev/neuron0:rwm",
    ]
    with pytest.warns(UserWarning, match="no device files known for 'acme.com/tpu'"):
        info = sched.submit_dryrun(
            app(
                "img", "-c", "true", resource=specs.Resource(1, 0, 64, devices={"acme.com/tpu": 1})
            ),
            {},
        )
    assert "devices" not in info.request.containers[0].kwargs


def test_gpus_devices_copy_env_and_bridge_network_in_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MY_FLAG_A", "1")
    monkeypatch.setenv("OTHER", "2")
    sched = LocalDockerScheduler("torchx", docker_client=object())
    a = app(
        "img",
        "-c",
        "true",
        n=2,
        resource=specs.Resource(cpu=2, gpu=1, memMB=512),
        mounts=specs.parse_mounts(
            ["type=device", "src=/dev/fuse", "type=volume", "src=vol1", "dst=/v"]
        ),
    )
    info = sched.submit_dryrun(
        a, {"copy_env": ["MY_FLAG_*"], "env": {"X": "y"}, "privileged": True}
    )
    c0, c1 = info.request.containers
    assert info.request.network == "torchx"
    assert c0.kwargs["device_requests"] == [
        {"Driver": "", "Count": 1, "Capabilities": [["compute", "utility"]]}
    ]
    assert c0.kwargs["devices"] == ["/dev/fuse:/dev/fuse:rwm"]
    assert c0.kwargs["mounts"] == [
        {"Target": "/v", "Source": "vol1", "Type": "volume", "ReadOnly": False},
        {
            "Target": "/torchx-nb/outputs",
            "Source": info.request.outputs,
            "Type": "bind",
            "ReadOnly": False,
        },
    ]
    assert c0.kwargs["environment"]["TORCHX_OUTPUT_DIR"] == "/torchx-nb/outputs"
    assert not os.path.exists(info.request.outputs)  # a dry run creates nothing
    assert c0.kwargs["environment"]["MY_FLAG_A"] == "1" and "OTHER" not in c0.kwargs["environment"]
    assert c0.kwargs["environment"]["X"] == "y" and c0.kwargs["privileged"]
    assert c1.kwargs["environment"]["TORCHX_RANK0_HOST"] == c0.kwargs["name"]
    assert c1.kwargs["hostname"] == c1.kwargs["name"]
    assert '"device_requests"' in repr(info)


def test_log_since_and_until(sched: LocalDockerScheduler, base_images: dict[str, str]) -> None:
    from datetime import datetime, timedelta, timezone

    app_id = run(sched, app(base_images["busybox"], "-c", "echo early"))
    assert wait_state(sched, app_id) == AppState.SUCCEEDED
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    past = datetime.now(timezone.utc) - timedelta(hours=1)
    assert list(sched.log_iter(app_id, "r", since=future)) == []
    assert list(sched.log_iter(app_id, "r", until=past)) == []
    assert list(sched.log_iter(app_id, "r", since=past, until=future)) == ["early\n"]


def test_cell_results_and_outputs_come_back_from_the_container(
    docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The image's Python (bookworm's, the kernel's minor version) runs the cell under the
    cell runner with the kernel's cloudpickle shipped beside it; the container writes to a host
    folder of the data dir bound at $TORCHX_OUTPUT_DIR."""
    from tests.result_checks import (
        RAISE_CELL,
        RESULT_CELL,
        assert_raises_remotely,
        assert_round_trip,
        result_workspace,
    )
    from torchx_nb.components.cell import cell
    from torchx_nb.notebook.handle import JobHandle

    ws = result_workspace(tmp_path)
    cfg = {"network": "host", "builder": "docker", "quiet": True}
    with get_runner() as runner:
        ok = runner.run(
            cell(source=RESULT_CELL, image=base_images["python"]), "local_docker", cfg, str(ws)
        )
        bad = runner.run(
            cell(source=RAISE_CELL, image=base_images["python"]), "local_docker", cfg, str(ws)
        )
        assert_round_trip(runner, ok, tmp_path / "dl")
        assert_raises_remotely(runner, bad)
        rec = runner.jobstore.get(ok)
        assert rec is not None and rec.outputs and "/local_docker/" in rec.outputs
        # the image's build is the job's first phase
        assert rec.build_seconds is not None and rec.build_seconds > 0
        assert JobHandle(ok, runner).phases()["phase"].iloc[0] == "image built and pushed"


def test_an_image_with_another_python_is_refused_before_the_build(
    docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    from torchx_nb.components.cell import cell

    client = docker_env.client()
    other = "localhost/torchx-nb-test/other-python:1"
    client.images.build(
        fileobj=__import__("io").BytesIO(
            f"FROM {base_images['python']}\nENV PYTHON_VERSION=3.8.18\n".encode()
        ),
        tag=other,
        rm=True,
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    before = {i.id for i in client.images.list()}
    with (
        get_runner() as runner,
        pytest.raises(
            Exception,
            match=r"image .* has Python 3\.8 and this kernel runs 3\.\d+: a cell's result",
        ),
    ):
        runner.run(cell(source="1", image=other), "local_docker", {"builder": "docker"}, str(ws))
    assert {i.id for i in client.images.list()} == before  # nothing was built


def test_a_container_over_its_memory_limit_is_told_as_out_of_memory(
    docker_env: DockerDaemon, base_images: dict[str, str]
) -> None:
    """A replica that allocates past its memMB is killed by the kernel's OOM killer: Docker's
    OOMKilled becomes the replica's oom flag and its failure card says so (not a cancel)."""
    from torchx_nb.specs.failure import FailureCard

    app = shell_app(
        "python3 -c 'x = bytearray(400 * 1024 * 1024); print(len(x))'",
        base_images["python"],
        name="hog",
        mem_mb=64,
    )
    with get_runner() as runner:
        handle = runner.run(app, "local_docker", {"network": "none"})
        status = runner.wait(handle, wait_interval=0.2, timeout=120)
        assert status is not None and status.state == AppState.FAILED, status
        (replica,) = status.roles[0].replicas
        assert replica.oom and replica.exit_code == 137
        (card,) = runner.failure_cards(handle, status)
        assert isinstance(card, FailureCard)
        assert card.headline() == "r/0 ran out of memory (exit code 137, SIGKILL)"
        assert "ran out of memory (OOMKilled)" in status.msg


def test_a_notebook_job_in_a_container(
    docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The workspace (notebook and sibling module) is patched onto the image with the cell
    runner; with nbclient in the job's Python (this machine's, lent by bind mounts) the
    executed notebook comes back from the container's output folder. An image without
    nbclient (and ``--packages none``, so the environment layer does not add it) fails the job
    with the one line that says what to add."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from tests.infra.dockerd import host_python_mounts
    from torchx_nb.components.notebook import notebook_app, notebook_program
    from torchx_nb.notebook.handle import JobHandle

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "helper.py").write_text("WHERE = 'container'\n")
    cells = [
        new_code_cell("n = 0", metadata={"tags": ["parameters"]}),
        new_code_cell("from helper import WHERE\nprint(WHERE, n)"),
    ]
    nbformat.write(new_notebook(cells=cells), ws / "nb.ipynb")
    program = notebook_program(str(ws / "nb.ipynb"), str(ws), {"n": 3})
    mounts, path = host_python_mounts()
    lent = notebook_app(program, image=base_images["python"], env={"PATH": path}, mounts=mounts)
    bare = notebook_app(program, image=base_images["python"])
    cfg = {"network": "host", "builder": "docker", "quiet": True}
    with get_runner() as runner:
        ok = JobHandle(runner.run(lent, "local_docker", cfg, str(ws), packages="none"), runner)
        missing = runner.run(bare, "local_docker", cfg, str(ws), packages="none")
        status = ok.wait(timeout=120, interval=0.5)
        assert status is not None and status.state == AppState.SUCCEEDED, status
        nb = nbformat.read(ok.notebook(tmp_path / "back"), 4)
        assert nb.cells[2].outputs[0].text == "container 3\n"
        status = runner.wait(missing, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.FAILED, status
        (card,) = runner.failure_cards(missing, status, lines=0)
        assert card.exception is not None and card.exception.startswith(
            "ModuleNotFoundError: the job's Python (/usr/bin/python"
        ), card.exception
        assert "pip install nbclient ipykernel in the image" in card.exception


def test_a_cancelled_notebook_job_is_cancelled_with_one_clean_line(
    docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """``docker stop`` sends SIGTERM: the notebook runner stops its kernel, saves the notebook
    and ends as killed by SIGTERM, so the job is CANCELLED (it was FAILED, nbclient's
    ``assert self.km is not None`` in the log) with one clean line."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from tests.infra.dockerd import host_python_mounts
    from torchx_nb.components.notebook import notebook_app, notebook_program
    from torchx_nb.notebook.handle import JobHandle

    ws = tmp_path / "ws"
    ws.mkdir()
    cells = [new_code_cell("print('first done')"), new_code_cell("import time\ntime.sleep(90)")]
    nbformat.write(new_notebook(cells=cells), ws / "long.ipynb")
    program = notebook_program(str(ws / "long.ipynb"), str(ws))
    mounts, path = host_python_mounts()
    app = notebook_app(program, image=base_images["python"], env={"PATH": path}, mounts=mounts)
    cfg = {"network": "host", "builder": "docker", "quiet": True}
    with get_runner() as runner:
        job = JobHandle(runner.run(app, "local_docker", cfg, str(ws), packages="none"), runner)
        wait_for(lambda: "[torchx_nb] cell 2: import time" in job.logs(), 120, interval=0.5)
        job.cancel()
        status = job.wait(timeout=60, interval=0.5)
        assert status is not None and status.state == AppState.CANCELLED, status
        log = job.logs()
        nb = nbformat.read(job.notebook(tmp_path / "back"), 4)
    assert log.splitlines()[-1] == (
        "torchx_nb: stopped during cell 2 ('import time') by SIGTERM (a cancel or a preemption:"
        " the job's status says which): the notebook is saved as far as it ran"
    ), log
    assert "AssertionError" not in log and "DeadKernelError" not in log
    assert nb.cells[0].outputs[0].text == "first done\n"


def test_a_package_the_kernel_has_and_the_image_lacks_is_one_line(
    docker_env: DockerDaemon, base_images: dict[str, str], tmp_path: Path
) -> None:
    """The kernel imports nbformat; the base image has no such package and ``--packages none``
    keeps the kernel's out: the job ends at once with one line naming the module, the job's
    Python and the image, not a traceback."""
    from torchx_nb.components.cell import cell

    ws = tmp_path / "ws"
    ws.mkdir()
    cfg = {"network": "host", "builder": "docker", "quiet": True}
    with get_runner() as runner:
        handle = runner.run(
            cell(source="import nbformat\nnbformat.__version__", image=base_images["python"]),
            "local_docker",
            cfg,
            str(ws),
            packages="none",  # what the cell runner says when nothing brings the package
        )
        status = runner.wait(handle, wait_interval=0.5, timeout=120)
        assert status is not None and status.state == AppState.FAILED, status
        (card,) = runner.failure_cards(handle, status, lines=0)
    assert card.exception == (
        "ModuleNotFoundError: No module named 'nbformat' in this job (line 1: import nbformat):"
        f" the job's Python is /usr/bin/python in the image {base_images['python']}; install"
        " nbformat there, or ship it in the workspace"
    ), card.exception


def test_a_cancelled_job_says_who_cancelled_it(
    docker_env: DockerDaemon, base_images: dict[str, str]
) -> None:
    """``torchx-nb cancel`` leaves who asked in its cancel mark (Docker keeps no who): the
    status says so; a container killed outside torchx_nb (``docker kill``) says that signal
    stopped it from outside torchx_nb."""
    import getpass
    import re

    from tests.conftest import cli

    script = "trap 'exit 143' TERM; sleep 60 & wait"
    with get_runner() as runner:
        ours, theirs = (
            runner.run(shell_app(script, base_images["busybox"]), "local_docker", {})
            for _ in range(2)
        )
        for handle in (ours, theirs):
            wait_for(lambda h=handle: runner.status(h).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
        code, _, err = cli("cancel", ours)
        assert code == 0, err
        app_id = theirs.rsplit("/", 1)[1]
        for c in docker_env.client().containers.list(
            filters={"label": f"torchx.pytorch.org/app-id={app_id}"}
        ):
            c.kill()  # SIGKILL, as `docker kill` sends
        cancelled = runner.wait(ours, wait_interval=0.2, timeout=60)
        stopped = runner.wait(theirs, wait_interval=0.2, timeout=60)
    assert cancelled is not None and cancelled.state == AppState.CANCELLED
    assert re.fullmatch(
        rf"it was cancelled by {getpass.getuser()} with torchx-nb cancel \(pid \d+\)",
        cancelled.msg,
    ), cancelled.msg
    assert stopped is not None and stopped.state == AppState.CANCELLED
    assert stopped.msg == (
        "it was stopped by SIGKILL from outside torchx_nb (docker stop or kill, or the host)"
    )
    (rep,) = [r for rs in stopped.roles for r in rs.replicas]
    assert rep.exit_code == 137 and rep.ending == stopped.msg.removeprefix("it ")


def test_a_program_that_ends_137_itself_failed_and_nobody_stopped_it(
    base_images: dict[str, str], docker_env: DockerDaemon
) -> None:
    """A container whose program exited 137 itself (``exit 137``; a shell whose child was
    SIGKILLed: the kernel, ``timeout -s KILL``) had no stop or kill sent to it: FAILED with
    exit code 137 — it was CANCELLED, 'stopped by SIGKILL from outside torchx_nb (docker
    stop or kill, or the host)'. A ``docker kill`` stays a stop from outside."""
    from tests.conftest import cli

    bb = base_images["busybox"]
    with get_runner() as runner:
        handles = [
            runner.run(shell_app(script, bb), "local_docker", {})
            for script in ("exit 137", "sleep 1 & kill -9 $!; wait $!", "sleep 60")
        ]
        wait_for(lambda: runner.status(handles[2]).state == AppState.RUNNING, 60)  # type: ignore[union-attr]
        app_id = handles[2].rsplit("/", 1)[1]
        for c in docker_env.client().containers.list(
            filters={"label": f"torchx.pytorch.org/app-id={app_id}"}
        ):
            c.kill()
        itself, child, killed = (runner.wait(h, wait_interval=0.2, timeout=60) for h in handles)
    for status in (itself, child):
        assert status is not None and status.state == AppState.FAILED, status
        assert "outside torchx_nb" not in status.msg, status.msg
        (rep,) = [r for rs in status.roles for r in rs.replicas]
        assert rep.exit_code == 137 and rep.state == AppState.FAILED and not rep.ending, rep
    assert killed is not None and killed.state == AppState.CANCELLED
    assert killed.msg == (
        "it was stopped by SIGKILL from outside torchx_nb (docker stop or kill, or the host)"
    )
    code, out, err = cli("status", handles[0])
    assert code == 0, err
    assert "State: FAILED" in out and "outside torchx_nb" not in out, out


def test_metrics_read_back_have_the_times_the_daemon_received_their_lines(
    docker_env: DockerDaemon, base_images: dict[str, str], isolated: Path
) -> None:
    """``job.metrics()`` parsed after the fact from a container's log: each point has the
    time Docker received its line (not NaT, not the time of reading), in the order written.
    Every line is a ``LogLine`` with its time and its own text: a line over Docker's 16 KB
    message size, which the daemon keeps in parts each with its own stamp, comes back whole
    with the time of its first part."""
    import time
    from itertools import pairwise

    from torchx_nb.metrics import parse_metric
    from torchx_nb.notebook.handle import JobHandle
    from torchx_nb.specs.log_line import LogLine

    script = (
        "for i in 1 2 3; do echo loss: 0.$i; echo step $i >&2; sleep 0.6; done;"
        " printf lo; sleep 0.6; echo 'ss: 0.9';"
        " head -c 40000 /dev/zero | tr '\\0' x; sleep 0.6; echo; echo last"
    )
    with get_runner() as runner:
        before = time.time()
        handle = runner.run(app(base_images["busybox"], "-c", script), "local_docker", {})
        status = runner.wait(handle, wait_interval=0.2, timeout=60)
        after = time.time()
        assert status is not None and status.state == AppState.SUCCEEDED, status
        job = JobHandle(handle, runner, [parse_metric("loss=loss: ([0-9.]+)")])
        frame = job.metrics()
        out = list(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))
        both = list(runner.log_lines(handle, "r", 0))
    assert frame["value"].tolist() == [0.1, 0.2, 0.3, 0.9]
    assert frame["time"].isna().sum() == 0
    stamps = [t.timestamp() for t in frame["time"]]
    assert all(before <= t <= after for t in stamps), (before, stamps, after)
    assert [round(b - a, 1) >= 0.5 for a, b in pairwise(stamps)] == [True] * 3
    short = ["loss: 0.1\n", "loss: 0.2\n", "loss: 0.3\n", "loss: 0.9\n", "last\n"]
    assert [line for line in out if len(line) < 100] == short
    assert [len(line) for line in out if len(line) >= 100] == [40001]
    assert set(out[4]) == {"x", "\n"}
    assert all(isinstance(line, LogLine) and line.time for line in [*out, *both])
    times = [line.time for line in out]  # type: ignore[attr-defined]
    assert times == sorted(times) and times[5] - times[4] >= 0.5  # the long line: its start
    assert sorted(both, key=lambda line: line.time) == both  # type: ignore[attr-defined]
    assert sorted(both) == sorted([*out, "step 1\n", "step 2\n", "step 3\n"])
