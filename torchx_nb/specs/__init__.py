"""TorchX's application model under the same names (``torchx_nb.specs`` ≈ ``torchx.specs``)."""

from __future__ import annotations

from torchx_nb.specs.api import (
    ALL,
    MISSING,
    NONE,
    NULL_RESOURCE,
    UNKNOWN,
    AppDef,
    AppDryRunInfo,
    AppHandle,
    AppState,
    AppStatus,
    AppStatusError,
    BindMount,
    CfgVal,
    DeviceMount,
    InvalidRunConfigException,
    MalformedAppHandleException,
    Mount,
    MountType,
    ParsedAppHandle,
    ReplicaState,
    ReplicaStatus,
    Resource,
    RetryPolicy,
    Role,
    RoleStatus,
    TorchxNbError,
    UnknownAppException,
    UnknownSchedulerException,
    VolumeMount,
    get_type_name,
    is_started,
    is_terminal,
    macros,
    make_app_handle,
    parse_app_handle,
    runopt,
    runopts,
)
from torchx_nb.specs.builders import materialize_appdef, parse_mounts
from torchx_nb.specs.named_resources import (
    UnknownNamedResourceError,
    get_named_resources,
    named_resources,
)
from torchx_nb.specs.structured_opts import StructuredOpts

GiB: int = 1024


def resource(
    cpu: int | None = None,
    gpu: int | None = None,
    memMB: int | None = None,
    h: str | None = None,
) -> Resource:
    """A Resource by named size ``h`` (e.g. ``"gpu.small"``), else from cpu/gpu/memMB
    (defaults 2 cpus, 0 gpus, 1024 MB)."""
    if h:
        return named_resources[h]
    return Resource(cpu=cpu or 2, gpu=gpu or 0, memMB=memMB or 1024)


__all__ = [
    "ALL",
    "MISSING",
    "NONE",
    "NULL_RESOURCE",
    "UNKNOWN",
    "AppDef",
    "AppDryRunInfo",
    "AppHandle",
    "AppState",
    "AppStatus",
    "AppStatusError",
    "BindMount",
    "CfgVal",
    "DeviceMount",
    "GiB",
    "InvalidRunConfigException",
    "MalformedAppHandleException",
    "Mount",
    "MountType",
    "ParsedAppHandle",
    "ReplicaState",
    "ReplicaStatus",
    "Resource",
    "RetryPolicy",
    "Role",
    "RoleStatus",
    "StructuredOpts",
    "TorchxNbError",
    "UnknownAppException",
    "UnknownNamedResourceError",
    "UnknownSchedulerException",
    "VolumeMount",
    "get_named_resources",
    "get_type_name",
    "is_started",
    "is_terminal",
    "macros",
    "make_app_handle",
    "materialize_appdef",
    "named_resources",
    "parse_app_handle",
    "parse_mounts",
    "resource",
    "runopt",
    "runopts",
]
