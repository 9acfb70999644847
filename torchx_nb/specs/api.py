"""The application model: TorchX's public names (AppDef, Role, Resource, ...) with the same fields,
defaults and behaviour, so TorchX users' components and configs carry over. Pure data, no I/O."""

from __future__ import annotations

import copy
import datetime
import difflib
import json
import re
import string
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum, IntEnum
from typing import Any, Generic, NamedTuple, TypeVar

ALL = "all"
MISSING = "<MISSING>"
NONE = "<NONE>"
UNKNOWN = "<UNKNOWN>"


class TorchxNbError(Exception):
    """Base of every error this package raises on purpose; the CLI and magics print it as one line."""


class MalformedAppHandleException(TorchxNbError):
    """An app handle is not of the form ``{scheduler}://{session}/{app_id}``."""

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"malformed app handle {app_handle!r}: expected SCHEDULER://SESSION/APP_ID,"
            " e.g. local_cwd://torchx/echo-abc123"
        )


class InvalidRunConfigException(TorchxNbError, ValueError):
    """A scheduler option is missing, of the wrong type or otherwise invalid. A ValueError
    too: where TorchX raised ValueError for a bad option (gcp_batch's GPU count, a role
    without resources), ``except ValueError`` still catches it."""

    def __init__(self, invalid_reason: str, cfg_key: str, cfg: Mapping[str, Any] | None = None):
        super().__init__(invalid_reason)
        self.cfg_key = cfg_key
        self.cfg = dict(cfg or {})


class UnknownAppException(TorchxNbError):
    """The scheduler has no record of the app."""

    def __init__(self, app_handle: str) -> None:
        super().__init__(
            f"unknown app {app_handle!r}: the scheduler has no record of it"
            " (check the handle with `torchx-nb list`)"
        )


class UnknownSchedulerException(TorchxNbError):
    """No scheduler is registered under that name."""

    def __init__(self, scheduler: str, known: list[str] | None = None) -> None:
        hint = ""
        if known:
            close = difflib.get_close_matches(scheduler, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            hint += f" (available: {', '.join(sorted(known))})"
        super().__init__(f"unknown scheduler {scheduler!r}{hint}")


class AppStatusError(TorchxNbError):
    """Raised by ``AppStatus.raise_for_status`` when an app did not succeed."""

    def __init__(self, status: AppStatus, *args: object) -> None:
        super().__init__(*args)
        self.status = status


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
    """The scheduler's native request for an app, and how to print it."""

    def __init__(self, request: T, fmt: Callable[[T], str]) -> None:
        self.request = request
        self._fmt = fmt
        self._app: AppDef | None = None
        self._cfg: Mapping[str, CfgVal] = {}
        self._scheduler: str | None = None
        self.workspace_preview: str | None = None
        self.environment: Any = None  # the environment plan (EnvPlan), when one was made
        self.build_seconds: float | None = None  # the image's build and push, when one ran

    @property
    def app(self) -> AppDef | None:
        return self._app

    @property
    def cfg(self) -> Mapping[str, CfgVal]:
        return dict(self._cfg)

    def __repr__(self) -> str:
        return self._fmt(self.request)


CfgVal = str | int | float | bool | list[str] | dict[str, str] | None

_TYPE_NAMES = {str: "str", int: "int", float: "float", bool: "bool"}


def get_type_name(tp: Any) -> str:
    """A type's name as TorchX prints it: ``int`` for classes, ``typing.List[str]`` for
    generics."""
    if getattr(tp, "__module__", "typing") != "typing" and hasattr(tp, "__name__"):
        return str(tp.__name__)
    return str(tp)


def _type_name(t: Any) -> str:
    if t in _TYPE_NAMES:
        return _TYPE_NAMES[t]
    return str(t).replace("typing.", "")


def _split(value: str) -> list[str]:
    return [p for p in re.split(r"[,;]", value) if p]


@dataclass
class runopt:
    """One scheduler option: default, type, whether required, help."""

    default: CfgVal
    opt_type: Any
    is_required: bool
    help: str

    @property
    def is_type_list_of_str(self) -> bool:
        return self.opt_type in (list[str], list, typing.List[str])  # noqa: UP006

    @property
    def is_type_dict_of_str(self) -> bool:
        return self.opt_type in (dict[str, str], dict, typing.Dict[str, str])  # noqa: UP006

    def cast_to_type(self, value: str) -> CfgVal:
        """Parse ``value`` (text from a command line or config file) as this option's type."""
        if self.opt_type is bool:
            low = value.strip().lower()
            if low in ("true", "1", "yes", "on"):
                return True
            if low in ("false", "0", "no", "off"):
                return False
            raise ValueError(f"expected true or false, got {value!r}")
        if self.is_type_list_of_str:
            return _split(value)
        if self.is_type_dict_of_str:
            out: dict[str, str] = {}
            for pair in _split(value):
                key, sep, val = pair.partition(":")
                if not sep:
                    raise ValueError(f"expected KEY:VALUE pairs, got {pair!r}")
                out[key] = val
            return out
        return self.opt_type(value)


def _matches_type(value: Any, opt: runopt) -> bool:
    if opt.opt_type is bool:
        return isinstance(value, bool)
    if opt.opt_type is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if opt.opt_type is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if opt.is_type_list_of_str:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if opt.is_type_dict_of_str:
        return isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
    if isinstance(opt.opt_type, type):
        return isinstance(value, opt.opt_type)
    return True


def split_key_values(text: str, delims: str = ",") -> list[tuple[str, str]]:
    """Split ``k=v,k2=a;b,k3="x,y"`` into pairs; a delimiter starts a new pair only before
    ``key=`` (so ``CUDA_VISIBLE_DEVICES=0,1`` is one pair, as in TorchX). Scheduler options pass
    ``delims=",;"``: TorchX reads ``K=a;b;J=d`` as ``K=a;b`` and ``J=d``. Raises ValueError."""
    pairs: list[tuple[str, str]] = []
    key: str | None = None
    buf: list[str] = []
    quote: str | None = None
    i = 0
    text = text.strip()

    def flush() -> None:
        nonlocal key, buf
        val = "".join(buf)
        if key is None:
            if val.strip():
                raise ValueError(f"expected KEY=VALUE, got {val.strip()!r}")
        else:
            pairs.append((key.strip(), val.strip()))
        key, buf = None, []

    while i < len(text):
        ch = text[i]
        if quote:
            if ch == quote:
                quote = None
            else:
                buf.append(ch)
        elif ch in "\"'":
            quote = ch
        elif ch == "=" and key is None:
            key = "".join(buf)
            buf = []
            if not key.strip():
                raise ValueError(f"missing key before '=' in {text!r}")
        elif ch in delims:
            rest = text[i + 1 :]
            if key is None or re.match(r"\s*[\w.\-]+\s*=", rest) or not rest.strip():
                flush()
            else:
                buf.append(ch)
        else:
            buf.append(ch)
        i += 1
    if quote:
        raise ValueError(f"unterminated quote in {text!r}")
    flush()
    return pairs


class runopts:
    """The set of options a scheduler accepts, with types, defaults and help."""

    def __init__(self) -> None:
        self._opts: dict[str, runopt] = {}

    def __iter__(self) -> Iterator[tuple[str, runopt]]:
        return iter(self._opts.items())

    def __len__(self) -> int:
        return len(self._opts)

    def __contains__(self, key: object) -> bool:
        return key in self._opts

    @staticmethod
    def is_type(obj: CfgVal, tp: Any) -> bool:
        """``isinstance`` that also takes ``List[str]``/``Dict[str, str]``: any list of strings or
        dict of strings matches a generic type (TorchX's rule)."""
        try:
            return isinstance(obj, tp)
        except TypeError:
            if isinstance(obj, list):
                return all(isinstance(e, str) for e in obj)
            if isinstance(obj, dict):
                return all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items())
            return False

    def add(
        self,
        cfg_key: str,
        type_: Any,
        help: str,
        default: CfgVal = None,
        required: bool = False,
    ) -> None:
        """Declare an option; a required option cannot have a default."""
        if required and default is not None:
            raise ValueError(f"required option {cfg_key!r} cannot have a default ({default!r})")
        opt = runopt(default, type_, required, help)
        if default is not None and not runopts.is_type(default, type_):
            raise TypeError(
                f"option {cfg_key!r}: default {default!r} is not of type {_type_name(type_)}"
            )
        self._opts[cfg_key] = opt

    def get(self, name: str) -> runopt | None:
        return self._opts.get(name)

    def update(self, other: runopts) -> None:
        self._opts.update(other._opts)

    def resolve(self, cfg: Mapping[str, CfgVal]) -> dict[str, CfgVal]:
        """A copy of ``cfg`` with defaults filled in; missing required options and wrong types
        raise InvalidRunConfigException. Unknown keys are kept."""
        resolved: dict[str, CfgVal] = dict(cfg)
        for key, opt in self._opts.items():
            val = resolved.get(key)
            if val is None or (opt.is_required and isinstance(val, str) and not val.strip()):
                if opt.is_required:
                    raise InvalidRunConfigException(
                        f"missing required option {key!r} ({_type_name(opt.opt_type)}: {opt.help});"
                        f" pass it with -cfg {key}=VALUE or set it in .torchxconfig",
                        key,
                        cfg,
                    )
                resolved[key] = copy.copy(opt.default)
            elif not _matches_type(val, opt):
                if isinstance(val, str):
                    try:
                        resolved[key] = opt.cast_to_type(val)
                        continue
                    except (ValueError, TypeError):
                        pass
                raise InvalidRunConfigException(
                    f"option {key!r} expects {_type_name(opt.opt_type)}, got {val!r}",
                    key,
                    cfg,
                )
        return resolved

    def unknown_keys(self, cfg: Mapping[str, Any]) -> list[str]:
        return [k for k in cfg if k not in self._opts]

    def suggest(self, key: str) -> str | None:
        close = difflib.get_close_matches(key, list(self._opts), n=1)
        return close[0] if close else None

    def cfg_from_str(self, cfg_str: str, strict: bool = False) -> dict[str, CfgVal]:
        """Parse ``"k=v,k2=a;b"`` into typed values. Unknown keys are dropped with a warning, or
        raise InvalidRunConfigException when ``strict``."""
        import warnings

        cfg: dict[str, CfgVal] = {}
        try:
            pairs = split_key_values(cfg_str, delims=",;")
        except ValueError as e:
            raise InvalidRunConfigException(
                f"cannot parse scheduler options {cfg_str!r}: {e}; write them as KEY=VALUE,KEY=VALUE",
                "",
            ) from None
        for key, raw in pairs:
            opt = self._opts.get(key)
            if opt is None:
                hint = self.suggest(key)
                msg = f"unknown option {key!r}" + (f"; did you mean {hint!r}?" if hint else "")
                msg += f" (known: {', '.join(self._opts) or 'none'})"
                if strict:
                    raise InvalidRunConfigException(msg, key)
                warnings.warn(msg, stacklevel=2)
                continue
            try:
                cfg[key] = None if raw == "None" else opt.cast_to_type(raw)
            except (ValueError, TypeError) as e:
                raise InvalidRunConfigException(
                    f"option {key!r} expects {_type_name(opt.opt_type)}: {e}", key
                ) from None
        return cfg

    def cfg_from_json_repr(self, json_repr: str) -> dict[str, CfgVal]:
        """Parse a JSON object of options, casting strings to each option's type."""
        raw = json.loads(json_repr)
        out: dict[str, CfgVal] = {}
        for key, val in raw.items():
            opt = self._opts.get(key)
            out[key] = opt.cast_to_type(val) if opt and isinstance(val, str) else val
        return out

    def __repr__(self) -> str:
        required = [(k, o) for k, o in self._opts.items() if o.is_required]
        optional = [(k, o) for k, o in self._opts.items() if not o.is_required]
        lines: list[str] = []
        if required:
            lines.append("    required arguments:")
            for k, o in required:
                lines.append(f"        {k}={k.upper()} ({_type_name(o.opt_type)})")
                lines.append(f"            {o.help}")
        if optional:
            lines.append("    optional arguments:")
            for k, o in optional:
                lines.append(f"        {k}={k.upper()} ({_type_name(o.opt_type)}, {o.default})")
                lines.append(f"            {o.help}")
        return "\n".join(lines) if lines else "    (no options)"
