"""``gcp_batch``'s options, one typed structure."""

from __future__ import annotations

from dataclasses import dataclass

from torchx_nb.schedulers.gcp_batch.constants import _DURATION_RE, DEFAULT_LOCATION
from torchx_nb.specs.api import (
    InvalidRunConfigException,
)
from torchx_nb.specs.structured_opts import SpotOpts, StructuredOpts
from torchx_nb.workspace import WorkspaceOpts


def parse_duration(text: str) -> int:
    """Seconds in ``3600``, ``3600s``, ``90m``, ``2h``, ``1h30m`` or ``1d``."""
    m = _DURATION_RE.match(text.strip())
    if not text.strip() or m is None:
        raise InvalidRunConfigException(
            f"max_run_duration {text!r} is not a duration: write e.g. 2h, 90m, 1h30m or 3600s",
            "max_run_duration",
        )
    d, h, mins, s = (int(g or 0) for g in m.groups())
    return ((d * 24 + h) * 60 + mins) * 60 + s


@dataclass(kw_only=True)
class _GcpBatchFields(StructuredOpts):
    project: str | None = None
    """Name of the GCP project. Defaults to the configured GCP project in the environment"""

    location: str = DEFAULT_LOCATION
    """Name of the location to schedule the job in. Defaults to us-central1"""

    machine_type: str | None = None
    """machine type (a2-highgpu-8g, n2-standard-8) or GPU family (a2-highgpu, a2-ultragpu,
    a3-highgpu, g2-standard: the member with the role's GPU count)"""

    provisioning_model: str | None = None
    """standard (when not given), or spot (cheaper VMs that can be preempted; -cfg spot=True
    says the same)"""

    service_account: str | None = None
    """email of the service account the VMs run as"""

    network: str | None = None
    """VPC network (projects/P/global/networks/N)"""

    subnetwork: str | None = None
    """subnetwork (projects/P/regions/R/subnetworks/S)"""

    labels: dict[str, str] | None = None
    """labels added to the job (key:value,key:value)"""

    max_run_duration: str | None = None
    """longest a task may run before it is failed (2h, 90m, 3600s)"""

    user: str | None = None
    """user labelled on the job (default: the current user)"""

    output_path: str | None = None
    """gs://BUCKET/PREFIX: each job's $TORCHX_OUTPUT_DIR (a cell's result, its files) is
    uploaded to PREFIX/JOB_NAME/ at its end (with google-cloud-storage from the image)"""


@dataclass(kw_only=True)
class GcpBatchOpts(WorkspaceOpts, SpotOpts, _GcpBatchFields):
    """gcp_batch's options (TorchX's, then ours), spot and the preemption limit, then the
    workspace's."""
