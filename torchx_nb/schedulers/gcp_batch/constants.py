"""GCP Batch's names, states and limits, as torchx_nb uses them."""

from __future__ import annotations

import re

from torchx_nb.specs.api import (
    AppState,
)

LABEL_VERSION = "torchx_version"


LABEL_APP_NAME = "torchx_app_name"


LABEL_USER = "torchx_user"


RANK0_ENV = "BATCH_MAIN_NODE_HOSTNAME"


TASK_INDEX = "$BATCH_TASK_INDEX"


TASK_GROUP = "group0"


LOG_NAME = "batch_task_logs"


BATCH_ENDPOINT_ENV = "TORCHX_NB_GCP_BATCH_ENDPOINT"


LOGGING_ENDPOINT_ENV = "TORCHX_NB_GCP_LOGGING_ENDPOINT"


SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]


DEFAULT_LOCATION = "us-central1"


FIREWALL_SCRIPT = "/sbin/iptables -A INPUT -j ACCEPT"


LOG_POLL_SECONDS = 3.0  # Cloud Logging allows 60 entries.list calls a minute per project


CANCEL_POLL_ENV = "TORCHX_NB_CANCEL_POLL"


CANCEL_POLL_SECONDS = 5  # how often an array task's cell runner looks for its cancel mark


JOB_STATES = {
    "STATE_UNSPECIFIED": AppState.UNKNOWN,
    "QUEUED": AppState.SUBMITTED,
    "SCHEDULED": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "CANCELLATION_IN_PROGRESS": AppState.RUNNING,
    "CANCELLED": AppState.CANCELLED,
    # torchx_nb deletes a job only to cancel it (where the API has no cancel)
    "DELETION_IN_PROGRESS": AppState.CANCELLED,
}


# how a 400 reads: InvalidArgument over gRPC, BadRequest over REST
BAD_REQUEST = ("InvalidArgument", "BadRequest")


ACTIVE_JOB_STATES = ("QUEUED", "SCHEDULED", "RUNNING", "CANCELLATION_IN_PROGRESS")


TASK_STATES = {
    "STATE_UNSPECIFIED": AppState.UNKNOWN,
    "PENDING": AppState.PENDING,
    "ASSIGNED": AppState.PENDING,
    "RUNNING": AppState.RUNNING,
    "SUCCEEDED": AppState.SUCCEEDED,
    "FAILED": AppState.FAILED,
    "UNEXECUTED": AppState.CANCELLED,
}


_JOB_ID_RE = re.compile(r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


_PROJECT_RE = re.compile(r"^[a-z][a-z0-9.:-]{2,62}$")


_LOCATION_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")


_PATH_RE = re.compile(r"^/[A-Za-z0-9._/@+-]*$")


_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s?)?$")
