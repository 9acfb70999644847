"""``kubernetes``'s options, one typed structure."""

from __future__ import annotations

from dataclasses import dataclass

from torchx_nb.specs.structured_opts import PreemptionOpts, StructuredOpts
from torchx_nb.workspace import WorkspaceOpts


@dataclass(kw_only=True)
class _KubernetesFields(StructuredOpts):
    namespace: str = "default"
    """Kubernetes namespace to schedule job in"""

    queue: str | None = None
    """Volcano queue to schedule job in (api=volcano)"""

    service_account: str | None = None
    """the service account name to set on the pod specs"""

    priority_class: str | None = None
    """the name of the PriorityClass to set on the job specs"""

    api: str = "volcano"
    """volcano (a vcjob, TorchX's) or indexed (a batch/v1 Indexed Job and a headless Service:
    clusters without Volcano)"""

    image_pull_secrets: list[str] | None = None
    """secrets for pulling the image"""

    node_selector: dict[str, str] | None = None
    """node labels the pods must match"""

    tolerations: list[str] | None = None
    """taints tolerated: KEY=VALUE:EFFECT or KEY:EFFECT"""

    spot: str | None = None
    """run on spot nodes: gke, eks or aks (that cloud's spot node label and taint), or true (a
    spot node of any of them); an eviction or reclaim never spends max_retries (api=indexed)"""

    output_path: str | None = None
    """s3://BUCKET/PREFIX or gs://BUCKET/PREFIX: each job's $TORCHX_OUTPUT_DIR (a cell's
    result, its files) is uploaded to PREFIX/JOB_NAME/ at its end (with boto3 or
    google-cloud-storage from the image)"""


@dataclass(kw_only=True)
class KubernetesOpts(WorkspaceOpts, PreemptionOpts, _KubernetesFields):
    """kubernetes' options (TorchX's, then ours), the preemption limit, then the workspace's."""
