"""moto_server on 127.0.0.1, running AWS Batch jobs as real containers on our dockerd (host
networking), plus the IAM role, compute environment and queue a job needs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.infra.dockerd import _stop, _wait, free_port

REGION = "us-west-2"


@dataclass
class MotoServer:
    endpoint: str
    proc: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
        }

    def client(self, service: str) -> Any:
        import boto3

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def use_docker(self, on: bool) -> None:
        import json

        req = urllib.request.Request(
            f"{self.endpoint}/moto-api/config",
            method="POST",
            data=json.dumps({"batch": {"use_docker": on}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        urllib.request.urlopen(req, timeout=10)

    def stop(self) -> None:
        _stop(self.proc, 5)


def moto_available() -> str | None:
    try:
        import moto  # noqa: F401
    except ImportError:
        return "moto is not installed: pip install 'moto[server,batch]'"
    return None


def start_moto(state_dir: Path, docker_host: str | None, port: int = 0) -> MotoServer:
    state_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    env = {**os.environ, "MOTO_DOCKER_NETWORK_MODE": "host"}
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    exe = shutil.which("moto_server")
    cmd = [exe] if exe else [sys.executable, "-m", "moto.server"]
    log = state_dir / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*cmd, "-H", "127.0.0.1", "-p", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server = MotoServer(f"http://127.0.0.1:{port}", proc)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("moto_server exited")
        urllib.request.urlopen(f"{server.endpoint}/moto-api/", timeout=2)
        return True

    _wait(up, 60, "moto_server", log)
    return server


def make_queue(server: MotoServer, name: str) -> str:
    """An UNMANAGED compute environment and a job queue called ``name``."""
    iam = server.client("iam")
    try:
        role = iam.create_role(RoleName="torchx-nb-batch", AssumeRolePolicyDocument="{}")["Role"]
    except iam.exceptions.EntityAlreadyExistsException:
        role = iam.get_role(RoleName="torchx-nb-batch")["Role"]
    batch = server.client("batch")
    ce = batch.create_compute_environment(
        computeEnvironmentName=f"{name}-ce",
        type="UNMANAGED",
        state="ENABLED",
        serviceRole=role["Arn"],
    )
    batch.create_job_queue(
        jobQueueName=name,
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": ce["computeEnvironmentArn"]}],
    )
    return name
