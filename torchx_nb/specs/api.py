"""The application model: TorchX's public names (AppDef, Role, Resource, ...) with the same fields,
defaults and behaviour, so TorchX users' components and configs carry over. Pure data, no I/O."""

from __future__ import annotations

import copy
import datetime
import json
import re
import string
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum, IntEnum
from typing import Any, Generic, NamedTuple, TypeVar

# TorchX's import path for these: torchx_nb.specs.api
from torchx_nb.specs.exceptions import (  # noqa: F401
    AppStatusError,
    InvalidRunConfigException,
    MalformedAppHandleException,
    TorchxNbError,
    UnknownAppException,
    UnknownSchedulerException,
)
from torchx_nb.specs.runopts import (  # noqa: F401
    CfgVal,
    as_cfg,
    get_type_name,
    runopt,
    runopts,
    split_key_values,
)

ALL = "all"
MISSING = "<MISSING>"
NONE = "<NONE>"
UNKNOWN = "<UNKNOWN>"


@dataclass
class Resource:
    """Resources a replica asks for: cpus, gpus, memory in MB, plus scheduler capabilities/devices."""

    cpu: int
    gpu: int
    memMB: int
    capabilities: dict[str, Any] = field(default_factory=dict)
    devices: dict[str, int] = field(default_factory=dict)
    tags: dict[str, object] = field(default_factory=dict)

    @staticmethod
    def copy(original: Resource, **capabilities: Any) -> Resource:
        """A copy of ``original`` with ``capabilities`` merged in (tags are not copied)."""
        caps = dict(original.capabilities)
        caps.update(capabilities)
        return Resource(
            cpu=original.cpu,
            gpu=original.gpu,
            memMB=original.memMB,
            capabilities=caps,
            devices=dict(original.devices),
        )


NULL_RESOURCE: Resource = Resource(cpu=-1, gpu=-1, memMB=-1)


class RetryPolicy(str, Enum):
    """How a scheduler restarts a failed job: the replica, its role, or the whole app."""

    REPLICA = "REPLICA"
    APPLICATION = "APPLICATION"
    ROLE = "ROLE"

    def __str__(self) -> str:
        return self.name


class MountType(str, Enum):
    BIND = "bind"
    VOLUME = "volume"
    DEVICE = "device"


@dataclass
class BindMount:
    """A host path mounted into the job."""

    src_path: str
    dst_path: str
    read_only: bool = False


@dataclass
class VolumeMount:
    """A named volume (EFS, PVC, docker volume, ...) mounted into the job."""

    src: str
    dst_path: str
    read_only: bool = False


@dataclass
class DeviceMount:
    """A host device made available to the job."""

    src_path: str
    dst_path: str
    permissions: str = "rwm"


Mount = BindMount | VolumeMount | DeviceMount


class macros:
    """Template strings substituted into role args, env values and metadata by each scheduler."""

    img_root = "${img_root}"
    base_img_root = "${base_img_root}"
    app_id = "${app_id}"
    replica_id = "${replica_id}"
    rank0_env = "${rank0_env}"

    @dataclass
    class Values:
        img_root: str
        app_id: str
        replica_id: str
        rank0_env: str
        base_img_root: str = "DEPRECATED"

        def apply(self, role: Role) -> Role:
            """A deep copy of ``role`` with the macros substituted in args, env and metadata."""
            original, overrides = role, role.overrides
            original.overrides = {}
            try:
                role = copy.deepcopy(original)
            finally:
                original.overrides = overrides
            role.overrides = overrides
            role.args = [self.substitute(a) for a in role.args]
            role.env = {k: self.substitute(v) for k, v in role.env.items()}
            role.metadata = self._apply_nested(role.metadata)
            return role

        def _apply_nested(self, d: Any) -> Any:
            if isinstance(d, str):
                return self.substitute(d)
            if isinstance(d, dict):
                return {k: self._apply_nested(v) for k, v in d.items()}
            if isinstance(d, list):
                return [self._apply_nested(v) for v in d]
            return d

        def substitute(self, arg: str) -> str:
            """``arg`` with every known macro replaced; unknown ``$names`` are left alone."""
            return string.Template(arg).safe_substitute(**self.to_dict())

        def to_dict(self) -> dict[str, Any]:
            return asdict(self)


@dataclass
class Role:
    """A set of identical replicas: image, entrypoint, args, env, resources, mounts and retries."""

    name: str
    image: str
    min_replicas: int | None = None
    base_image: str | None = None
    entrypoint: str = MISSING
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    num_replicas: int = 1
    max_retries: int = 0
    retry_policy: RetryPolicy = RetryPolicy.APPLICATION
    resource: Resource = field(default_factory=lambda: NULL_RESOURCE)
    port_map: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)

    def pre_proc(self, scheduler: str, dryrun_info: AppDryRunInfo[Any]) -> AppDryRunInfo[Any]:
        """Hook to adjust the scheduler's native request; called once per role after dryrun."""
        return dryrun_info

    def __getattribute__(self, attrname: str) -> Any:
        if attrname == "overrides":
            return super().__getattribute__(attrname)
        try:
            ov = super().__getattribute__("overrides")
        except AttributeError:
            ov = {}
        if attrname in ov:
            value = ov[attrname]
            if callable(value):
                value = value()
                ov[attrname] = value
            return value
        return super().__getattribute__(attrname)


@dataclass
class AppDef:
    """An application: a name, its roles and free-form metadata."""

    name: str
    roles: list[Role] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


class AppState(IntEnum):
    """The lifecycle state of an app (and of each replica)."""

    UNSUBMITTED = 0
    SUBMITTED = 1
    PENDING = 2
    RUNNING = 3
    SUCCEEDED = 4
    FAILED = 5
    CANCELLED = 6
    UNKNOWN = 7

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"{self.name} ({self.value})"


ReplicaState = AppState

_TERMINAL_STATES = frozenset({AppState.SUCCEEDED, AppState.FAILED, AppState.CANCELLED})
_STARTED_STATES = _TERMINAL_STATES | {AppState.RUNNING}


def is_terminal(state: AppState) -> bool:
    """True once an app can change state no more."""
    return state in _TERMINAL_STATES


def is_started(state: AppState) -> bool:
    return state in _STARTED_STATES


@dataclass
class ReplicaStatus:
    id: int
    state: AppState
    role: str
    hostname: str
    structured_error_msg: str = NONE
    hostaddr: str | None = None
    exit_code: int | None = None
    num_restarts: int = 0
    oom: bool = False  # its scheduler says it was killed for running out of memory
    # the signal that ended it, when its scheduler says so exactly (Slurm's ``code:signal``, a
    # local process's negative return code); 0: it exited by itself; None: not told, so a
    # container's 128+N exit code is read as signal N
    signal: int | None = None
    ended: float | None = None  # when it ended (epoch seconds), as its scheduler tells
    # why it ended, in words, when its scheduler says (a time limit, who cancelled it), and
    # what to do about it
    ending: str = ""
    next_step: str = ""

    def __post_init__(self) -> None:
        if self.hostaddr is None:
            self.hostaddr = self.hostname


@dataclass
class RoleStatus:
    role: str
    replicas: list[ReplicaStatus]

    def to_json(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "replicas": [{**asdict(r), "state": r.state.name} for r in self.replicas],
        }


@dataclass
class AppStatus:
    """What ``Runner.status`` returns: state, restarts, message, UI link and per-role replicas;
    ``started``/``ended`` are the scheduler's own times (epoch seconds) when it reports them."""

    state: AppState
    num_restarts: int = 0
    msg: str = ""
    structured_error_msg: str = NONE
    ui_url: str | None = None
    roles: list[RoleStatus] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None

    def is_terminal(self) -> bool:
        return is_terminal(self.state)

    def raise_for_status(self) -> None:
        """Raise ``AppStatusError`` unless the app SUCCEEDED."""
        if self.state != AppState.SUCCEEDED:
            raise AppStatusError(self, f"job did not succeed: {self}")

    def to_json(self, filter_roles: list[str] | None = None) -> dict[str, Any]:
        roles = [r for r in self.roles if not filter_roles or r.role in filter_roles]
        return {
            "state": str(self.state),
            "num_restarts": self.num_restarts,
            "roles": [r.to_json() for r in roles],
            "msg": self.msg,
            "structured_error_msg": self.structured_error_msg,
            "url": self.ui_url,
        }

    def format(self, filter_roles: list[str] | None = None) -> str:
        """TorchX's multi-line summary: state, restarts, one line per replica (``*`` marks each
        role's replica 0) with a failed replica's exit code, time, host and error message."""
        roles = "".join(
            _format_replica(r)
            for role in self.roles
            if not filter_roles or role.role in filter_roles
            for r in sorted(role.replicas, key=lambda r: r.id)
        )
        return (
            "AppStatus:\n"
            f"    State: {self.state}\n"
            f"    Num Restarts: {self.num_restarts}\n"
            f"    Roles: {roles}\n"
            f"    Msg: {self.msg}\n"
            f"    Structured Error Msg: {self.structured_error_msg}\n"
            f"    UI URL: {self.ui_url}\n"
            "    "
        )

    def __repr__(self) -> str:
        """TorchX's YAML block (``AppStatus:`` then the fields); replica states read as
        ``FAILED (5)`` rather than Python object tags, and the scheduler's times appear when known."""
        import yaml

        data = asdict(self)
        for key in ("started", "ended"):
            if data[key] is None:
                del data[key]
        data["state"] = repr(self.state)
        data["structured_error_msg"] = _parse_error_json(self.structured_error_msg)
        for role in data["roles"]:
            for rep in role["replicas"]:
                rep["state"] = repr(AppState(rep["state"]))
        return yaml.safe_dump({"AppStatus": data})

    __str__ = __repr__


def message_text(msg: str | None) -> str:
    """A scheduler's message for people: empty for none and for TorchX's ``<NONE>``
    placeholder."""
    return "" if not msg or msg == NONE else msg


def display_url(url: str | None) -> str | None:
    """A scheduler's UI link for people: a local job's ``file://`` log folder as its path
    (browsers will not open ``file://`` from a page), anything else as it is."""
    if url and url.startswith("file://"):
        return url[len("file://") :]
    return url


def _parse_error_json(text: str) -> Any:
    if text == NONE:
        return NONE
    try:
        return json.loads(text)
    except ValueError:
        return text


def _error_message(msg: str) -> str:
    """The useful part of an error message: the text inside an RPC wrapper
    (``RuntimeError('On WorkerInfo(...):\\n ... ')``) and the part before an embedded
    ``\\nException`` trailer. Plain string searches, so hostile text cannot make it slow."""
    start = msg.find("('On WorkerInfo(")
    if start >= 0:
        head = start
        while head > 0 and (msg[head - 1].isalnum() or msg[head - 1] == "_"):
            head -= 1
        end = msg.find("\n')", start)
        if end >= 0:
            msg = msg[head : end + 3]
    cut = msg.find("\nException")
    if cut > 0:
        msg = msg[:cut].rsplit("\n", 1)[-1]
    return msg


def _wrap(msg: str, header: str, width: int = 80) -> str:
    """Break ``msg`` at the first space after every ``width`` characters; continuation lines
    keep that space and are indented under the header (TorchX's layout)."""
    chunks: list[str] = []
    start = 0
    for i, ch in enumerate(msg):
        if ch == " " and i - start >= width:
            chunks.append(msg[start:i])
            start = i
    chunks.append(msg[start:])
    pad = " " * len(header)
    return "\n".join((header if i == 0 else pad) + c for i, c in enumerate(chunks))


def _format_replica(r: ReplicaStatus) -> str:
    mark = "*" if r.id == 0 else " "
    data = str(r.state)
    if r.structured_error_msg != NONE:
        try:
            err = json.loads(r.structured_error_msg)["message"]
            text, code = str(err["message"]), err.get("errorCode") or "<N/A>"
            when = datetime.datetime.fromtimestamp(int(err["extraInfo"]["timestamp"]))
        except (ValueError, KeyError, TypeError, OverflowError, OSError):
            data = r.structured_error_msg
        else:
            data = (
                f"{r.state} (exitcode: {code})\n"
                f"        timestamp: {when}\n"
                f"        hostname: {r.hostname}\n"
                f"    {_wrap(_error_message(text), '    error_msg: ')}"
            )
    elif r.state in (AppState.FAILED, AppState.CANCELLED):
        data += f" (exitcode: {r.exit_code})" if r.exit_code is not None else " (no reply file)"
    return f"\n {mark}{r.role}[{r.id}]:{data}"


AppHandle = str


class ParsedAppHandle(NamedTuple):
    scheduler_backend: str
    session_name: str
    app_id: str


_HANDLE_RE = re.compile(r"(?P<scheduler_backend>[^:/]+)://(?P<session_name>[^/]*)/(?P<app_id>.+)")


def make_app_handle(scheduler_backend: str, session_name: str, app_id: str) -> AppHandle:
    return f"{scheduler_backend}://{session_name}/{app_id}"


def parse_app_handle(app_handle: AppHandle) -> ParsedAppHandle:
    """Split ``scheduler://session/app_id``; raises MalformedAppHandleException otherwise."""
    m = _HANDLE_RE.fullmatch(app_handle.strip())
    if not m:
        raise MalformedAppHandleException(app_handle)
    return ParsedAppHandle(**m.groupdict())


T = TypeVar("T")


class AppDryRunInfo(Generic[T]):
    """The scheduler's native request for an app, and how to print it (TorchX's type; the
    runner's prepared run holds it, and nothing else is kept on it)."""

    def __init__(self, request: T, fmt: Callable[[T], str]) -> None:
        self.request = request
        self._fmt = fmt
        self._app: AppDef | None = None
        self._cfg: Mapping[str, CfgVal] = {}
        self._scheduler: str | None = None

    @property
    def app(self) -> AppDef | None:
        return self._app

    @property
    def cfg(self) -> Mapping[str, CfgVal]:
        """The options as TorchX's code reads them, a mapping (typed ones by attribute: the
        prepared run's ``opts``)."""
        return as_cfg(self._cfg)

    def __repr__(self) -> str:
        return self._fmt(self.request)
