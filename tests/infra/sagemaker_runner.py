"""Runs a CreateTrainingJob request in our dockerd the way SageMaker starts a training image
(moto completes training jobs at once and runs nothing): one container per instance
(``algo-1``…``algo-N``) with ``ContainerEntrypoint``/``ContainerArguments`` and the
``Environment``; ``/opt/ml/input/config/`` holding ``hyperparameters.json``,
``resourceconfig.json`` and ``inputdataconfig.json``; ``/opt/ml/model`` and ``/opt/ml/output``
as writable folders; the job's failure reason read from ``/opt/ml/output/failure``.

Where it differs from SageMaker: all instances share the host's network (host names map to
127.0.0.1 through ``extra_hosts``, as does the machine's own name, which SageMaker's
hosts resolve); they share the host's process ids too, since torchrun tells nodes apart by
host name and pid, and every container would otherwise be the same pid on the same host. And
``extra_mounts`` can lend the containers this machine's
Python with torch, since no torch image can be pulled offline."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Instance:
    host: str
    exit_code: int
    logs: str
    failure: str


@dataclass
class TrainingRun:
    instances: list[Instance]

    @property
    def status(self) -> str:
        return "Completed" if all(i.exit_code == 0 for i in self.instances) else "Failed"

    @property
    def failure_reason(self) -> str:
        return next((i.failure for i in self.instances if i.failure), "")


def run_training_job(
    docker: Any,
    request: dict[str, Any],
    workdir: Path,
    extra_mounts: dict[str, dict[str, str]] | None = None,
    timeout: float = 180,
) -> TrainingRun:
    algo = request["AlgorithmSpecification"]
    res = request["ResourceConfig"]
    hosts = [f"algo-{i + 1}" for i in range(int(res["InstanceCount"]))]
    containers = []
    try:
        for host in hosts:
            root = workdir / host
            config = root / "input" / "config"
            config.mkdir(parents=True)
            (root / "model").mkdir()
            (root / "output").mkdir()
            (config / "hyperparameters.json").write_text(
                json.dumps(request.get("HyperParameters") or {})
            )
            (config / "inputdataconfig.json").write_text("{}")
            (config / "resourceconfig.json").write_text(
                json.dumps(
                    {
                        "current_host": host,
                        "current_instance_type": res["InstanceType"],
                        "current_group_name": "homogeneousCluster",
                        "hosts": hosts,
                        "instance_groups": [
                            {
                                "instance_group_name": "homogeneousCluster",
                                "instance_type": res["InstanceType"],
                                "hosts": hosts,
                            }
                        ],
                        "network_interface_name": "lo",
                    },
                    indent=4,
                )
            )
            volumes = {
                str(root / "input"): {"bind": "/opt/ml/input", "mode": "ro"},
                str(root / "model"): {"bind": "/opt/ml/model", "mode": "rw"},
                str(root / "output"): {"bind": "/opt/ml/output", "mode": "rw"},
                **(extra_mounts or {}),
            }
            containers.append(
                docker.containers.run(
                    algo["TrainingImage"],
                    entrypoint=algo["ContainerEntrypoint"],
                    command=algo.get("ContainerArguments") or [],
                    environment=request.get("Environment") or {},
                    network_mode="host",
                    pid_mode="host",
                    extra_hosts={h: "127.0.0.1" for h in [*hosts, socket.gethostname()]},
                    volumes=volumes,
                    detach=True,
                    labels={"torchx-nb-test": "sagemaker"},
                )
            )
        instances = []
        for host, c in zip(hosts, containers, strict=True):
            try:
                code = int(c.wait(timeout=timeout)["StatusCode"])
            except Exception as e:
                logs = {
                    h: k.logs().decode(errors="replace")[-3000:]
                    for h, k in zip(hosts, containers, strict=True)
                }
                raise AssertionError(
                    f"{host} did not finish within {timeout}s: {e}; {logs}"
                ) from None
            failure = workdir / host / "output" / "failure"
            instances.append(
                Instance(
                    host,
                    code,
                    c.logs().decode(errors="replace"),
                    failure.read_text() if failure.exists() else "",
                )
            )
        return TrainingRun(instances)
    finally:
        for c in containers:
            c.remove(force=True)


def upload_model(s3: Any, request: dict[str, Any], workdir: Path, host: str = "algo-1") -> str:
    """What SageMaker does when a training job ends: ``/opt/ml/model`` of the first host as
    ``model.tar.gz`` under ``S3OutputPath/JOB/output/``. Returns the key."""
    import io
    import tarfile

    bucket, _, prefix = request["OutputDataConfig"]["S3OutputPath"][5:].partition("/")
    key = f"{prefix.strip('/') + '/' if prefix.strip('/') else ''}"
    key += f"{request['TrainingJobName']}/output/model.tar.gz"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(workdir / host / "model", arcname=".")
    s3.put_object(Bucket=bucket, Key=key, Body=buf.getvalue())
    return key
