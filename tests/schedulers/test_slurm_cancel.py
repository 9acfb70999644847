"""A Slurm cancel as an unlucky user gives it (slurm/cancel.py and the batch script's trap),
on the real cluster."""

from __future__ import annotations

import threading

from tests.conftest import wait_for
from tests.infra.slurm import SlurmCluster
from torchx_nb import specs
from torchx_nb.runner import get_runner
from torchx_nb.specs.api import AppState
from torchx_nb.specs.log_line import Stream


def _role(name: str, program: str) -> specs.Role:
    return specs.Role(
        name=name,
        image="",
        entrypoint="bash",
        args=["-c", program],
        resource=specs.Resource(cpu=1, gpu=0, memMB=200),
    )


def test_a_second_cancel_during_the_grace_does_not_cut_the_program_short(
    slurm_env: SlurmCluster,
) -> None:
    """Cancel clicked twice (the widget, then the CLI): the second SIGTERM to the batch script
    broke its ``wait`` for srun, and the script then ended the job with a plain scancel while
    the program was still saving — srun SIGKILLed it, "saved" never came. The program keeps its
    grace and the job ends CANCELLED once it has ended."""
    program = (
        "trap 'echo got SIGTERM; sleep 4; echo saved; exit 143' TERM; echo ready; sleep 300 & wait"
    )
    with get_runner() as runner:
        handle = runner.run(specs.AppDef("twice", roles=[_role("r", program)]), "slurm", {})
        wait_for(lambda: "ready" in "".join(runner.log_lines(handle, "r", 0)), timeout=60)
        first = threading.Thread(target=runner.cancel, args=(handle,))
        first.start()
        wait_for(lambda: "got SIGTERM" in "".join(runner.log_lines(handle, "r", 0)), timeout=30)
        runner.cancel(handle)  # the second click, while the program saves
        first.join(timeout=60)
        status = runner.wait(handle, wait_interval=0.5, timeout=60)
        log = "".join(runner.log_lines(handle, "r", 0, streams=Stream.STDOUT))
    assert status is not None and status.state == AppState.CANCELLED, status
    assert log == "ready\ngot SIGTERM\nsaved\n", log
    (replica,) = status.roles[0].replicas
    assert (replica.state, replica.exit_code) == (AppState.CANCELLED, 143), replica


def test_a_heterogeneous_job_cancel_gives_every_component_its_sigterm(
    slurm_env: SlurmCluster,
) -> None:
    """Two roles (two het components): the cancel's SIGTERM reaches each component's program,
    each has its time to end on it, and the job and both replicas are CANCELLED as soon as the
    job reads ended — the component that ended second was still RUNNING (or FAILED, its exit
    143 read before its own CANCELLED) in the first CANCELLED status, the one ``wait`` returns
    and the widget's end card and the notice show."""
    program = (
        "trap 'echo got SIGTERM; sleep 2; echo saved; exit 143' TERM; echo ready; sleep 300 & wait"
    )
    app = specs.AppDef("het", roles=[_role("a", program), _role("b", program)])
    with get_runner() as runner:
        handle = runner.run(app, "slurm", {})
        for role in ("a", "b"):
            wait_for(lambda r=role: "ready" in "".join(runner.log_lines(handle, r, 0)), timeout=60)
        runner.cancel(handle)
        status = runner.wait(handle, wait_interval=0.5, timeout=60)
        logs = ["".join(runner.log_lines(handle, role, 0, streams=Stream.STDOUT)) for role in "ab"]
    assert status is not None and status.state == AppState.CANCELLED, status
    assert logs == ["ready\ngot SIGTERM\nsaved\n"] * 2, logs
    states = [(r.replicas[0].state, r.replicas[0].exit_code) for r in status.roles]
    assert states == [(AppState.CANCELLED, 143)] * 2, status
