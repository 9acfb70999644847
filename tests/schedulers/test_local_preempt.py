"""``preempt`` on the local backends, with real processes (local_cwd's supervisor): the replicas
get SIGTERM, SIGKILL after the grace, the attempt is recorded and the app runs again."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.infra.dockerd import DockerDaemon
from torchx_nb import specs
from torchx_nb.schedulers.local_cwd import LocalCwdScheduler, create_scheduler
from torchx_nb.schedulers.local_docker import LocalDockerScheduler, container_name
from torchx_nb.specs import AppState
from torchx_nb.specs.exceptions import NotPreemptible
from torchx_nb.specs.log_line import Stream

# each replica counts its runs in a file of its own; the first run waits for the preemption
# (saying when SIGTERM came), a later one ends at once
COUNTING = (
    'n=$(( $(cat "runs-$R" 2>/dev/null || echo 0) + 1 )); echo $n > "runs-$R"; '
    'echo "run $n"; '
    "if [ $n -ge 2 ]; then echo resumed; exit 0; fi; "
    "trap 'echo got SIGTERM; exit 143' TERM; "
    "while :; do sleep 0.1; done"
)


def _app(script: str, n: int = 1) -> specs.AppDef:
    return specs.AppDef(
        "p",
        roles=[
            specs.Role(
                name="r",
                image="unused",
                entrypoint="sh",
                args=["-c", script],
                num_replicas=n,
                env={"R": "${replica_id}"},
            )
        ],
    )


@pytest.fixture
def sched() -> LocalCwdScheduler:
    return create_scheduler("torchx", grace_seconds=5.0)


def _run(sched: LocalCwdScheduler, a: specs.AppDef) -> str:
    return sched.schedule(sched.submit_dryrun(a, {}))


def _state(sched: LocalCwdScheduler, app_id: str) -> dict[str, object]:
    return json.loads((sched._app_dir(app_id) / "state.json").read_text())


def _log(sched: LocalCwdScheduler, app_id: str, k: int) -> list[str]:
    return list(sched.log_iter(app_id, "r", k, streams=Stream.STDOUT))


def _wait_end(sched: LocalCwdScheduler, app_id: str) -> specs.AppStatus:
    def done() -> object:
        d = sched.describe(app_id)
        return d if d is not None and specs.is_terminal(d.state) else None

    return wait_for(done, timeout=60)  # type: ignore[return-value]


def test_local_cwd_preempt_stops_every_replica_and_runs_them_again(
    sched: LocalCwdScheduler,
) -> None:
    app_id = _run(sched, _app(COUNTING, n=2))
    wait_for(lambda: all(_log(sched, app_id, k) == ["run 1\n"] for k in (0, 1)), timeout=30)
    asked = time.time()
    sched.preempt(app_id, grace=5)
    end = _wait_end(sched, app_id)
    assert end.state == AppState.SUCCEEDED, end
    assert end.num_restarts == 1
    for k in (0, 1):  # one log per replica, both attempts in it
        assert _log(sched, app_id, k) == ["run 1\n", "got SIGTERM\n", "run 2\n", "resumed\n"]
    (attempt,) = _state(sched, app_id)["attempts"]  # type: ignore[misc]
    assert attempt["n"] == 1 and attempt["why"] == "preempted" and attempt["grace"] == 5
    assert attempt["exitcodes"] == {"r": [143, 143]}
    assert asked <= attempt["preempted_at"] <= attempt["ended"] < asked + 5
    assert _state(sched, app_id)["attempt"] == 2
    # describe lists it from the supervisor's record
    (event,) = end.preemptions
    assert event.why == "torchx-nb preempt" and event.at == attempt["preempted_at"]
    assert event.resumed_at is not None and attempt["ended"] <= event.resumed_at < asked + 6


def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace(
    sched: LocalCwdScheduler,
) -> None:
    script = COUNTING.replace("trap 'echo got SIGTERM; exit 143' TERM", "trap '' TERM")
    app_id = _run(sched, _app(script))
    wait_for(lambda: _log(sched, app_id, 0) == ["run 1\n"], timeout=30)
    sched.preempt(app_id, grace=1.5)

    def stopping() -> object:
        d = sched.describe(app_id)
        return d if d is not None and d.msg.startswith("preempted at") else None

    during = wait_for(stopping, timeout=10)
    assert during.state == AppState.RUNNING  # type: ignore[attr-defined]
    assert during.msg.endswith("its replicas are stopping, then it runs again (attempt 2)")  # type: ignore[attr-defined]
    end = _wait_end(sched, app_id)
    assert end.state == AppState.SUCCEEDED and end.num_restarts == 1
    (attempt,) = _state(sched, app_id)["attempts"]  # type: ignore[misc]
    assert attempt["exitcodes"] == {"r": [-9]}
    assert 1.5 <= attempt["ended"] - attempt["preempted_at"] < 4


def test_only_a_running_app_can_be_preempted(sched: LocalCwdScheduler) -> None:
    app_id = _run(sched, _app("echo done"))
    assert _wait_end(sched, app_id).state == AppState.SUCCEEDED
    with pytest.raises(
        NotPreemptible, match=r"^.* is not running: only a running app can be preempted$"
    ):
        sched.preempt(app_id)
    with pytest.raises(NotPreemptible, match="local_cwd has no app 'nope-1' to preempt"):
        sched.preempt("nope-1")
    assert not (sched._app_dir(app_id) / "preempt").exists()


def test_a_cancel_during_a_preemption_wins(sched: LocalCwdScheduler, isolated: Path) -> None:
    script = COUNTING.replace("trap 'echo got SIGTERM; exit 143' TERM", "trap '' TERM")
    app_id = _run(sched, _app(script))
    wait_for(lambda: _log(sched, app_id, 0) == ["run 1\n"], timeout=30)
    sched.preempt(app_id, grace=3)
    wait_for(lambda: _state(sched, app_id).get("preempting"), timeout=10)
    sched.cancel(app_id)
    end = _wait_end(sched, app_id)
    assert end.state == AppState.CANCELLED
    assert _log(sched, app_id, 0) == ["run 1\n"]  # never ran again


def test_local_docker_preempt_stops_the_containers_and_runs_new_ones(
    docker_env: DockerDaemon, base_images: dict[str, str]
) -> None:
    sched = LocalDockerScheduler("torchx", docker_client=docker_env.client())
    # the runs are counted in the output folder, the one place both containers share
    script = COUNTING.replace('"runs-$R"', '"$TORCHX_OUTPUT_DIR/runs-$R"')
    a = _app(script, n=2)
    a.roles[0].image = base_images["busybox"]
    app_id = sched.schedule(sched.submit_dryrun(a, {"network": "host"}))

    def log(k: int) -> list[str]:
        return list(sched.log_iter(app_id, "r", k, streams=Stream.STDOUT))

    wait_for(lambda: all(log(k) == ["run 1\n"] for k in (0, 1)), timeout=60)
    sched.preempt(app_id, grace=5)
    end = wait_for(
        lambda: (d := sched.describe(app_id)) and specs.is_terminal(d.state) and d, timeout=60
    )
    assert end.state == AppState.SUCCEEDED, end  # type: ignore[attr-defined]
    assert end.num_restarts == 1  # type: ignore[attr-defined]
    for k in (0, 1):  # the attempts' logs in order
        assert log(k) == ["run 1\n", "got SIGTERM\n", "run 2\n", "resumed\n"]
    names = sorted((c.name, c.labels["torchx-nb/attempt"]) for c in sched._containers(app_id))
    assert names == sorted(
        [(container_name(app_id, "r", k), "2") for k in (0, 1)]
        + [(f"{container_name(app_id, 'r', k)}-attempt1", "1") for k in (0, 1)]
    )
    # the new container is the old one again: same labels, environment and host settings
    new, old = (
        docker_env.client().containers.get(n)
        for n in (container_name(app_id, "r", 0), f"{container_name(app_id, 'r', 0)}-attempt1")
    )
    # the environment too, but for the attempt's number (each rank of attempt 2 reads 2) and
    # the attempt it stopped, named for the checkpoint ledger
    attempt = [e for e in old.attrs["Config"]["Env"] if e.startswith("TORCHX_NB_DOCKER_ATTEMPT=")]
    assert attempt == ["TORCHX_NB_DOCKER_ATTEMPT=1"]
    assert new.attrs["Config"]["Env"] == [
        *(e for e in old.attrs["Config"]["Env"] if e not in attempt),
        "TORCHX_NB_DOCKER_ATTEMPT=2",
        "TORCHX_NB_RECLAIMED=/1",
    ]
    assert "TORCHX_NB_ATTEMPT_ENV=TORCHX_NB_DOCKER_ATTEMPT" in new.attrs["Config"]["Env"]
    assert new.attrs["HostConfig"]["Mounts"] == old.attrs["HostConfig"]["Mounts"]
    assert new.attrs["HostConfig"]["NetworkMode"] == "host"
    assert old.attrs["State"]["ExitCode"] == 143
    (event,) = end.preemptions  # type: ignore[attr-defined]
    assert event.why == "torchx-nb preempt"
    assert event.at <= event.resumed_at < event.at + 5  # stopped, then the next ran
    assert [x.app_id for x in sched.list() if x.app_id == app_id] == [app_id]
    with pytest.raises(NotPreemptible, match="is not running: only a running app can be preempted"):
        sched.preempt(app_id)


def test_a_preemption_as_the_program_ends_does_not_run_it_again(
    sched: LocalCwdScheduler, tmp_path: Path
) -> None:
    """``torchx-nb preempt`` just after the program exited 0, before the supervisor saw it
    exit: the job SUCCEEDED, its program is not run a second time. A helper the program
    leaves behind (holding its pipes, as a leftover background process does) writes the
    preempt marker once the program is a zombie."""
    runs, where = tmp_path / "runs", tmp_path / "where"
    script = (
        f'n=$(( $(cat "{runs}" 2>/dev/null || echo 0) + 1 )); echo $n > "{runs}"; '
        'echo "run $n"; if [ $n -ge 2 ]; then exit 0; fi; '
        f'while [ ! -s "{where}" ]; do sleep 0.05; done; '
        "( while grep -qs '^State:[[:space:]]*[RSD]' /proc/$$/status; do :; done; "
        f'echo \'{{"grace": 5}}\' > "$(cat "{where}")/preempt" ) & exit 0'
    )
    app_id = _run(sched, _app(script))
    wait_for(lambda: _log(sched, app_id, 0) == ["run 1\n"], timeout=30)
    where.write_text(str(sched._app_dir(app_id)))
    end = _wait_end(sched, app_id)
    assert end.state == AppState.SUCCEEDED and end.num_restarts == 0, end
    assert _log(sched, app_id, 0) == ["run 1\n"]  # run once
    assert _state(sched, app_id)["attempts"] == []


def test_a_second_preempt_while_the_first_is_under_way_is_refused(
    sched: LocalCwdScheduler,
) -> None:
    """Preempt twice quickly: the second, asked while the first's replicas are stopping, is
    one line — not a second preemption of the attempt that has not started yet."""
    script = COUNTING.replace("trap 'echo got SIGTERM; exit 143' TERM", "trap '' TERM")
    app_id = _run(sched, _app(script))
    wait_for(lambda: _log(sched, app_id, 0) == ["run 1\n"], timeout=30)
    sched.preempt(app_id, grace=2)
    with pytest.raises(NotPreemptible, match=r"^.* is being preempted already: preempt it again"):
        sched.preempt(app_id, grace=2)  # its marker not taken yet
    wait_for(lambda: _state(sched, app_id).get("preempting"), timeout=10)
    with pytest.raises(NotPreemptible, match=r"^.* is being preempted already: preempt it again"):
        sched.preempt(app_id, grace=2)  # its replicas stopping
    end = _wait_end(sched, app_id)
    assert end.state == AppState.SUCCEEDED and end.num_restarts == 1, end
    assert _log(sched, app_id, 0) == ["run 1\n", "run 2\n", "resumed\n"]
