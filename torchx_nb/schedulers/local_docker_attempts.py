"""local_docker's attempts: a preempted replica's container is stopped (SIGTERM, SIGKILL after
the grace), renamed ``<name>-attempt<n>`` and kept as the record of that attempt, and a new
container with the same name, labels and configuration (read back from the daemon, so no
copy of the job's environment is written anywhere) runs the next attempt, labelled with its
number. ``describe``, ``list`` and the logs take each replica's newest attempt for its state;
its logs are the attempts' logs in order."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from torchx_nb.apps.cell_runner.checkpoint import RECLAIMED_ENV, add_reclaimed, native_job
from torchx_nb.specs.preemption import Preemption

LABEL_ATTEMPT = "torchx-nb/attempt"
#: the attempt's number in the container's environment, as Batch's AWS_BATCH_JOB_ATTEMPT:
#: the checkpoint's ledger tells every rank of one attempt by it
ATTEMPT_ENV = "TORCHX_NB_DOCKER_ATTEMPT"
LABEL_APP_ID = "torchx.pytorch.org/app-id"
LABEL_ROLE_NAME = "torchx.pytorch.org/role-name"
LABEL_REPLICA_ID = "torchx.pytorch.org/replica-id"


def attempt_of(container: Any) -> int:
    """The attempt a container runs (1 for a container made before attempts were kept)."""
    text = str(container.labels.get(LABEL_ATTEMPT, "1"))
    return int(text) if text.isdigit() else 1


def replica_key(container: Any) -> tuple[str, int]:
    text = str(container.labels.get(LABEL_REPLICA_ID, "0"))
    return container.labels.get(LABEL_ROLE_NAME, ""), int(text) if text.isdigit() else 0


def newest(containers: Iterable[Any]) -> list[Any]:
    """Each replica's container of its newest attempt."""
    best: dict[tuple[str, int], Any] = {}
    for c in containers:
        key = replica_key(c)
        if key not in best or attempt_of(c) > attempt_of(best[key]):
            best[key] = c
    return list(best.values())


def attempts_of(containers: Iterable[Any], role: str, k: int) -> list[Any]:
    """One replica's containers, oldest attempt first."""
    return sorted((c for c in containers if replica_key(c) == (role, k)), key=attempt_of)


def stop_running(containers: list[Any], grace: float) -> list[Any]:
    """Stop each replica's running newest container in parallel (``docker stop``: SIGTERM,
    SIGKILL after ``grace`` seconds); the containers stopped."""
    running = [c for c in newest(containers) if c.status in ("running", "restarting")]
    threads = [
        threading.Thread(target=c.stop, kwargs={"timeout": max(round(grace), 0)}) for c in running
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return running


def rerun(client: Any, old: Any) -> str:
    """A new container like ``old`` (its image, command, environment, labels and host
    configuration as the daemon records them) under ``old``'s name, labelled with the next
    attempt; ``old`` keeps its logs under ``<name>-attempt<n>``. The new container's id. An
    ``old`` renamed already (a preemption worker stopped midway) is not renamed again."""
    old.reload()
    n = attempt_of(old)
    kept = f"-attempt{n}"
    name = old.name.removesuffix(kept)  # a replica's own name ends with its number
    cfg, host = old.attrs["Config"], old.attrs["HostConfig"]
    if old.name != name + kept:
        old.rename(name + kept)
    mode = str(host.get("NetworkMode") or "")
    env = dict(str(e).partition("=")[::2] for e in cfg.get("Env") or [])
    # the attempt stopped, named for the next one's ledger: a program that ignored SIGTERM and
    # was killed at the grace's end never said it was preempted
    named = add_reclaimed(env.get(RECLAIMED_ENV, ""), [f"{native_job(env)}/{n}"])
    ours = (f"{ATTEMPT_ENV}=", f"{RECLAIMED_ENV}=")
    created = client.api.create_container(
        image=cfg["Image"],
        command=cfg.get("Cmd"),
        entrypoint=cfg.get("Entrypoint"),
        environment=[
            *(e for e in cfg.get("Env") or [] if not str(e).startswith(ours)),
            f"{ATTEMPT_ENV}={n + 1}",
            f"{RECLAIMED_ENV}={named}",
        ],
        labels={**(cfg.get("Labels") or {}), LABEL_ATTEMPT: str(n + 1)},
        name=name,
        hostname=None if mode in ("host", "none") else cfg.get("Hostname"),
        working_dir=cfg.get("WorkingDir") or None,
        user=cfg.get("User") or None,
        host_config=host,
    )
    client.api.start(created["Id"])
    return str(created["Id"])


def preemptions(containers: list[Any], when: Any) -> list[Preemption]:
    """One preemption per attempt that a newer one followed: when its containers had all
    stopped and when the next attempt's started (``when(container, "StartedAt")``, a time or
    None)."""
    by_attempt: dict[int, list[Any]] = {}
    for c in containers:
        by_attempt.setdefault(attempt_of(c), []).append(c)
    out = []
    for n in sorted(by_attempt)[:-1]:
        ended = [when(c, "FinishedAt") for c in by_attempt[n]]
        started = [when(c, "StartedAt") for c in by_attempt.get(n + 1, [])]
        at = max((t for t in ended if t), default=None)
        if at is not None:
            resumed = min((t for t in started if t), default=None)
            out.append(Preemption(at=at, why="torchx-nb preempt", resumed_at=resumed))
    return out
