"""The Docker daemon client shared by the local_docker scheduler and the docker image builder,
with one clear error when no daemon answers."""

from __future__ import annotations

import os
from typing import Any

from torchx_nb.specs.exceptions import DockerUnavailableError as DockerUnavailableError


def docker_client() -> Any:
    """A ``docker.DockerClient`` from the environment (``DOCKER_HOST``…) that answered a ping."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as e:
        host = os.environ.get("DOCKER_HOST", "the default socket")
        raise DockerUnavailableError(
            f"no Docker daemon answers at {host} ({type(e).__name__}); start Docker or"
            " set DOCKER_HOST — without a daemon, run on a remote scheduler with"
            " -cfg builder=registry"
        ) from None
    return client
