"""``kubernetes``: an app becomes a Volcano job (TorchX's ``vcjob``: a task per replica) or, on
the many clusters without Volcano, a plain ``batch/v1`` Indexed Job with a headless Service for
rendezvous (``-cfg api=indexed``). With ``api=indexed`` a sweep's trials are one Indexed Job,
each completion index a trial ``NAMESPACE:NAME:INDEX``. Images are patched with the workspace
and pushed to ``image_repo``; logs come from the pod log API.

TorchX's names carry over: the request is a ``KubernetesJob`` (``resource``, ``images_to_push``),
the handle is ``kubernetes://SESSION/NAMESPACE:NAME``, and the options, labels, resources and
volumes are TorchX's. The ``kubernetes`` client is imported when first needed; credentials come
from the standard kubeconfig (``KUBECONFIG``, ``~/.kube/config``) or the in-cluster service
account, and an ``ApiClient`` can be injected."""

from __future__ import annotations

from torchx_nb.schedulers.kubernetes import constants
from torchx_nb.schedulers.kubernetes.client import KubernetesError, call
from torchx_nb.schedulers.kubernetes.constants import *  # noqa: F403  (the one-module names)
from torchx_nb.schedulers.kubernetes.describe import array_job
from torchx_nb.schedulers.kubernetes.options import KubernetesOpts
from torchx_nb.schedulers.kubernetes.request import (
    KubernetesJob,
    LocalImageWithoutRepo,
    indexed_resources,
    local_images,
    normalize,
    parse_app_id,
    parse_trial_id,
    pod_template,
    push_local_images,
    resources,
    volcano_resource,
)
from torchx_nb.schedulers.kubernetes.scheduler import KubernetesScheduler, create_scheduler

__all__ = [
    *(name for name in vars(constants) if name.isupper() and not name.startswith("_")),
    "KubernetesError",
    "KubernetesJob",
    "KubernetesOpts",
    "KubernetesScheduler",
    "LocalImageWithoutRepo",
    "array_job",
    "call",
    "create_scheduler",
    "indexed_resources",
    "local_images",
    "normalize",
    "parse_app_id",
    "parse_trial_id",
    "pod_template",
    "push_local_images",
    "resources",
    "volcano_resource",
]
