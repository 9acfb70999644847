"""Kubernetes and Volcano names, labels and states, as torchx_nb uses them."""

from __future__ import annotations

import re

from torchx_nb.specs.api import (
    AppState,
)

LABEL_VERSION = "torchx.pytorch.org/version"


LABEL_APP_NAME = "torchx.pytorch.org/app-name"


LABEL_ROLE_INDEX = "torchx.pytorch.org/role-index"


LABEL_ROLE_NAME = "torchx.pytorch.org/role-name"


LABEL_REPLICA_ID = "torchx.pytorch.org/replica-id"


LABEL_KUBE_APP_NAME = "app.kubernetes.io/name"


LABEL_ORGANIZATION = "app.kubernetes.io/managed-by"


LABEL_INSTANCE = "app.kubernetes.io/instance"


ORGANIZATION = "torchx.pytorch.org"


INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"


ITYPE = "node.kubernetes.io/instance-type"


RANK0_ENV = "TORCHX_RANK0_HOST"


VOLCANO = ("batch.volcano.sh", "v1alpha1", "jobs")


PODGROUP = ("scheduling.volcano.sh", "v1beta1", "podgroups")


GROUP_ANNOTATION = "scheduling.k8s.io/group-name"  # a Volcano pod's PodGroup


VOLCANO_QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")


RESERVED_MILLICPU = 100


RESERVED_MEMMB = 1024


VOLCANO_STATES = {
    "Pending": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Restarting": AppState.RUNNING,
    "Completing": AppState.RUNNING,
    "Aborting": AppState.RUNNING,
    "Terminating": AppState.RUNNING,
    "Completed": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Terminated": AppState.FAILED,
    "Aborted": AppState.CANCELLED,
}


POD_STATES = {
    "Pending": AppState.PENDING,
    "Running": AppState.RUNNING,
    "Succeeded": AppState.SUCCEEDED,
    "Failed": AppState.FAILED,
    "Unknown": AppState.UNKNOWN,
}


_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
