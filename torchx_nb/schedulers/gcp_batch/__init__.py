"""``gcp_batch``: an app becomes one GCP Batch job (one task group, a task per replica), its image
patched with the workspace and pushed to Artifact Registry; logs come from Cloud Logging's
``batch_task_logs``.

TorchX's names carry over: the request is a ``GCPBatchJob`` whose ``job_def`` is the
``batch_v1.Job`` sent, the handle is ``gcp_batch://SESSION/PROJECT:LOCATION:JOB`` and the options
``project`` and ``location`` mean what they meant there. Unlike TorchX, ``${replica_id}`` is each
task's real index (in commands ``$BATCH_TASK_INDEX``, expanded by ``/bin/sh -c``, since GCP Batch
runs a container command without a shell; in env values the number itself).

The Google libraries are imported when a client is first needed. Clients (or credentials) can be
injected; otherwise credentials come from ``google.auth.default()`` (Application Default
Credentials) and the API endpoints from ``TORCHX_NB_GCP_BATCH_ENDPOINT`` and
``TORCHX_NB_GCP_LOGGING_ENDPOINT`` when set (private or regional endpoints). Both clients use the
REST transport: one code path, whether the endpoint is Google's or a loopback test server.

A cell sweep with an ``output_path`` goes as one job with a task count (``SubmitsArrays``): each
trial is a task, ``PROJECT:LOCATION:JOB:INDEX``. GCP Batch runs the tasks independently (one
that fails leaves the others running) but has no call that stops one task, so a trial's cancel
is a mark in the job's bucket that the cell runner looks for (``$TORCHX_NB_CANCEL_POLL``)."""

from __future__ import annotations

from torchx_nb.schedulers.gcp_batch import constants
from torchx_nb.schedulers.gcp_batch.client import (
    GcpClients,
    GcpError,
    default_project,
    gcp_error,
    is_transient,
    storage_client,
)
from torchx_nb.schedulers.gcp_batch.constants import *  # noqa: F403  (the one-module names)
from torchx_nb.schedulers.gcp_batch.options import GcpBatchOpts, parse_duration
from torchx_nb.schedulers.gcp_batch.request import (
    GCPBatchJob,
    job_name,
    label_value,
    parse_app_id,
    parse_trial_id,
    task_command,
)
from torchx_nb.schedulers.gcp_batch.scheduler import GcpBatchScheduler, create_scheduler

__all__ = [
    *(name for name in vars(constants) if name.isupper() and not name.startswith("_")),
    "GCPBatchJob",
    "GcpBatchOpts",
    "GcpBatchScheduler",
    "GcpClients",
    "GcpError",
    "create_scheduler",
    "default_project",
    "gcp_error",
    "is_transient",
    "job_name",
    "label_value",
    "parse_app_id",
    "parse_duration",
    "parse_trial_id",
    "storage_client",
    "task_command",
]
