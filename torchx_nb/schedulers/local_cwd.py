"""``local_cwd``: each replica a process on this machine, run in the workspace folder (or the
current directory). No image, nothing to install: the embedded default.

Unlike TorchX's local scheduler, an app's state lives on disk: a detached supervisor
(``local_supervisor/``) runs the replicas and records their exit codes, so ``describe``,
``log_iter``, ``list`` and ``cancel`` work from any process, after the submitter has exited."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from torchx_nb.apps.cell_runner.common import REPLICA_ID_ENV
from torchx_nb.paths import write_private
from torchx_nb.schedulers.abilities import (
    DirWorkspaceMixin,
    KeepsLogFiles,
    LocalWorkspace,
    Preemptible,
    RunsEndHook,
    StoresOutputs,
    TakesTypedOptions,
)
from torchx_nb.schedulers.api import (
    DescribeAppResponse,
    GivenOpts,
    ListAppResponse,
    LogQuery,
    Scheduler,
)
from torchx_nb.schedulers.cancellers import canceller
from torchx_nb.schedulers.ids import make_unique
from torchx_nb.schedulers.local_cwd_request import (
    PopenRequest,
    ReplicaParam,
    check_app_id,
    format_request,
    role_to_json,
)
from torchx_nb.schedulers.local_cwd_status import read_pidfile, response_from_files
from torchx_nb.schedulers.local_supervisor import is_same_process, kill_orphans, start_ticks
from torchx_nb.schedulers.logs import LineSplitter, tail_wait, timed_lines
from torchx_nb.schedulers.outputs import OUTPUT_DIR_ENV, checkpoint_env
from torchx_nb.specs.api import (
    AppDef,
    AppDryRunInfo,
    is_terminal,
    macros,
    make_app_handle,
)
from torchx_nb.specs.exceptions import NotPreemptible
from torchx_nb.specs.log_line import Stream
from torchx_nb.specs.preemption import not_running, preempting_already
from torchx_nb.specs.structured_opts import PreemptionOpts, StructuredOpts

RANK0_ENV = "TORCHX_RANK0_HOST"
SUPERVISOR = Path(__file__).with_name("local_supervisor")  # a folder, run by its __main__
# A log tail that found nothing new looks again after at most this long.
TAIL_IDLE_S = 1.0


def _spawn_detached(argv: list[str], log: Path) -> int:
    """Start ``argv`` in a session of its own (stdin and stdout /dev/null, stderr to ``log``,
    0600), SIGINT blocked, and return its pid. A bare pid, not a ``Popen``: the supervisor is meant to outlive
    this process, which must not warn at exit that it is still running."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, fd, 2),
        ]
        # SIGINT blocked until the supervisor drops what is pending: a kernel interrupt sent to
        # this process's group while the child is still in it (before setsid) must not kill it
        return os.posix_spawn(
            argv[0],
            argv,
            os.environ,
            file_actions=actions,
            setsid=True,
            setsigmask={signal.SIGINT},
        )
    finally:
        os.close(fd)


def _reaped(pid: int) -> bool:
    """Whether our child ``pid`` has exited (and is now reaped, leaving no zombie)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == pid


@dataclass(kw_only=True)
class _LocalCwdFields(StructuredOpts):
    """local_cwd's own options."""

    log_dir: str | None = None
    """folder for the replicas' logs (default: the app's folder under the torchx_nb data dir)"""

    prepend_cwd: bool = False
    """put the working directory first on PATH (default: last)"""

    auto_set_cuda_visible_devices: bool = False
    """give each replica its own slice of the GPUs via CUDA_VISIBLE_DEVICES"""


@dataclass(kw_only=True)
class LocalCwdOpts(PreemptionOpts, _LocalCwdFields):
    """local_cwd's options, then the preemption limit (``torchx-nb preempt``)."""


class LocalCwdScheduler(
    TakesTypedOptions,
    DirWorkspaceMixin,
    KeepsLogFiles,
    StoresOutputs,
    RunsEndHook,
    Preemptible,
    Scheduler[LocalCwdOpts],
):
    """Runs each replica as a subprocess of a per-app supervisor, in the workspace folder (or
    the current one)."""

    is_local = True
    preempt_grace = 10.0  # the supervisor's grace (GRACE_SECONDS), as for a cancel

    def __init__(
        self,
        session_name: str,
        state_root: str | os.PathLike[str] | None = None,
        extra_paths: list[str] | None = None,
        grace_seconds: float = 10.0,
    ) -> None:
        super().__init__("local_cwd", session_name)
        self.grace_seconds = float(grace_seconds)
        self._children: list[int] = []
        self._reaped_at = 0.0
        self._requests: dict[str, tuple[tuple[int, int, int], dict[str, Any]]] = {}
        self._key_paths: dict[str, list[str]] = {}
        self._described: dict[
            str, tuple[tuple[Any, ...], DescribeAppResponse, tuple[int, int | None] | None]
        ] = {}
        self._default_root = state_root is None
        if state_root is None:
            from torchx_nb.paths import data_dir

            state_root = data_dir() / "local_cwd"
        self.state_root = Path(state_root)
        self._root_checked = False
        self.extra_paths = list(extra_paths or [])

    def output_url(self, app_id: str, request: PopenRequest) -> str | None:
        """The app's ``outputs`` folder, beside its state (private, in the data dir)."""
        return f"file://{request.state_dir}/outputs"

    def _validate(self, app: AppDef, scheduler: str, cfg: LocalCwdOpts | None = None) -> None:
        """Resources are advisory on local_cwd; nothing to check."""

    def _session_dir(self) -> Path:
        """The folder of this session's apps, checked once to be the user's own and written by
        nobody else (a planted ``state.json`` would name processes for us to signal)."""
        path = self.state_root / self.session_name
        if not self._root_checked:
            from torchx_nb.paths import private_dir, state_dir

            root = state_dir("local_cwd") if self._default_root else private_dir(self.state_root)
            private_dir(root / self.session_name)
            self._root_checked = True
        return path

    def _app_dir(self, app_id: str) -> Path:
        return self._session_dir() / check_app_id(app_id)

    def _submit_dryrun_in(
        self, app: AppDef, cfg: LocalCwdOpts, workspace: LocalWorkspace | None
    ) -> AppDryRunInfo[PopenRequest]:
        """The replicas run in ``workspace`` (the current folder without one)."""
        app_id = make_unique(app.name)
        state_dir = self.state_root / self.session_name / check_app_id(app_id)
        log_root = (
            Path(cfg.log_dir).expanduser().absolute() / self.session_name / app_id
            if cfg.log_dir
            else state_dir
        )
        cwd = str(Path(workspace.path).expanduser().resolve()) if workspace else os.getcwd()
        req = PopenRequest(
            app_id=app_id,
            state_dir=str(state_dir),
            log_dir=str(log_root),
            grace_seconds=self.grace_seconds,
        )
        gpu_slices = self._gpu_slices(app) if cfg.auto_set_cuda_visible_devices else {}
        for role in app.roles:
            req.roles.append(role_to_json(role))
            params: list[ReplicaParam] = []
            dirs: list[str] = []
            for i in range(role.num_replicas):
                values = macros.Values(
                    img_root=cwd, app_id=app_id, replica_id=str(i), rank0_env=RANK0_ENV
                )
                r = values.apply(role)
                rdir = log_root / role.name / str(i)
                env = dict(r.env)
                env[RANK0_ENV] = "localhost"
                env.setdefault(REPLICA_ID_ENV, str(i))  # each rank's own checkpoint folder
                env.setdefault("TORCHELASTIC_ERROR_FILE", str(rdir / "error.json"))
                env.setdefault(OUTPUT_DIR_ENV, str(state_dir / "outputs"))
                for key, value in checkpoint_env(
                    f"file://{state_dir / 'checkpoints'}",  # kept with the app's folder
                    str(state_dir / "checkpoint"),
                    attempt_var="TORCHX_NB_LOCAL_ATTEMPT",  # set by the supervisor
                    max_retries=role.max_retries,
                    grace=self.grace_seconds,
                    reclaims_named=True,  # the supervisor names the replicas it preempted
                ).items():
                    env.setdefault(key, value)
                env.setdefault("PET_LOG_DIR", str(log_root / "torchelastic" / role.name))
                env.setdefault("PYTHONUNBUFFERED", "x")
                env["PATH"] = self._path(r.env.get("PATH"), cwd, cfg.prepend_cwd)
                if (role.name, i) in gpu_slices:
                    env["CUDA_VISIBLE_DEVICES"] = gpu_slices[(role.name, i)]
                entrypoint = r.entrypoint
                if os.sep not in entrypoint:
                    entrypoint = shutil.which(entrypoint, path=env["PATH"]) or entrypoint
                params.append(
                    ReplicaParam(
                        args=[entrypoint, *r.args],
                        env=env,
                        stdout=str(rdir / "stdout.log"),
                        stderr=str(rdir / "stderr.log"),
                        combined=str(rdir / "combined.log"),
                        cwd=cwd,
                    )
                )
                dirs.append(str(rdir))
            req.role_params[role.name] = params
            req.role_log_dirs[role.name] = dirs
        return AppDryRunInfo(req, format_request)

    def _path(self, role_path: str | None, cwd: str, prepend_cwd: bool) -> str:
        """The replica's PATH: the role's, this Python's bin folder, extra paths, ours, cwd."""
        parts = [p for p in (role_path or "").split(os.pathsep) if p]
        parts.append(os.path.dirname(sys.executable))
        parts.extend(self.extra_paths)
        parts.extend(p for p in os.environ.get("PATH", "").split(os.pathsep) if p)
        if prepend_cwd:
            parts.insert(0, cwd)
        else:
            parts.append(cwd)
        seen: set[str] = set()
        return os.pathsep.join(p for p in parts if not (p in seen or seen.add(p)))  # type: ignore[func-returns-value]

    def _gpu_slices(self, app: AppDef) -> dict[tuple[str, int], str]:
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
            count = len([ln for ln in out.stdout.splitlines() if ln.startswith("GPU")])
        except (OSError, subprocess.TimeoutExpired):
            return {}
        wanted = sum(max(r.resource.gpu, 0) * r.num_replicas for r in app.roles)
        if wanted == 0 or wanted > count:
            return {}
        slices: dict[tuple[str, int], str] = {}
        nxt = 0
        for role in app.roles:
            for i in range(role.num_replicas):
                g = max(role.resource.gpu, 0)
                slices[(role.name, i)] = ",".join(str(x) for x in range(nxt, nxt + g))
                nxt += g
        return slices

    def schedule(self, dryrun_info: AppDryRunInfo[PopenRequest]) -> str:
        req = dryrun_info.request
        state_dir = Path(req.state_dir)
        self._session_dir()
        state_dir.mkdir(mode=0o700, exist_ok=False)
        (state_dir / "outputs").mkdir(mode=0o700)
        if Path(req.log_dir) != state_dir:
            from torchx_nb.paths import mark_log_folder

            mark_log_folder(Path(req.log_dir).parent)
        write_private(state_dir / "request.json", json.dumps(asdict(req)))
        if self.end_hook:  # beside the request, not in it: what the supervisor runs at the end
            handle = make_app_handle(self.backend, self.session_name, req.app_id)
            write_private(
                state_dir / "on_end.json",
                json.dumps({"argv": [*self.end_hook, handle], "cwd": os.getcwd()}),
            )
        pid = _spawn_detached(
            [sys.executable, "-I", "-S", str(SUPERVISOR), str(state_dir)],
            state_dir / "supervisor.log",
        )
        write_private(state_dir / "supervisor.pid", f"{pid} {start_ticks(pid) or ''}")
        self._children.append(pid)
        return req.app_id

    def _read(self, app_id: str) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
        state_dir = self._app_dir(app_id)
        path = state_dir / "request.json"
        try:
            st = os.stat(path)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = self._requests.get(app_id)
            if cached is not None and cached[0] == key:
                request = cached[1]
            else:
                with open(path) as f:
                    request = json.load(f)
                self._requests[app_id] = (key, request)
        except (FileNotFoundError, NotADirectoryError):
            self._requests.pop(app_id, None)
            return None
        try:
            with open(state_dir / "state.json") as f:
                state: dict[str, Any] | None = json.load(f)
        except FileNotFoundError:
            state = None
        return request, state

    def _reap(self, every: float = 0.5) -> None:
        """Collect the supervisors we started that have exited (no zombies), and forget them;
        at most once per ``every`` seconds, since watchers describe often."""
        now = time.monotonic()
        if self._children and now - self._reaped_at >= every:
            self._reaped_at = now
            self._children = [pid for pid in self._children if not _reaped(pid)]

    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The app's state from its files. Watchers ask often, so an answer is reused while
        none of the files changed and the supervisor is the same live process."""
        self._reap()
        key = self._files_key(app_id)
        hit = self._described.get(app_id)
        if hit is not None and hit[0] == key:
            cached, supervisor = hit[1], hit[2]
            if is_terminal(cached.state) or (supervisor and is_same_process(*supervisor)):
                return replace(cached)
        found = self._describe(app_id)
        if found is None:
            self._described.pop(app_id, None)
            return None
        resp, (pid, ticks) = found
        self._described[app_id] = (key, resp, (pid, ticks) if pid else None)
        return resp

    def _files_key(self, app_id: str) -> tuple[Any, ...]:
        paths = self._key_paths.get(app_id)
        if paths is None:
            base = str(self._app_dir(app_id))
            paths = [
                os.path.join(base, name)
                for name in ("request.json", "state.json", "cancel", "supervisor.pid")
            ]
            self._key_paths[app_id] = paths
        key: list[Any] = []
        for path in paths:
            try:
                st = os.stat(path)
                key.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                key.append(None)
        return tuple(key)

    def _describe(
        self, app_id: str
    ) -> tuple[DescribeAppResponse, tuple[int | None, int | None]] | None:
        """The response, and the supervisor's pid and start time it was judged by."""
        found = self._read(app_id)
        if found is None:
            return None
        return response_from_files(app_id, self._app_dir(app_id), *found)

    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        root = self._session_dir()
        out: list[ListAppResponse] = []
        for d in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime):
            desc = self.describe(d.name)
            if desc is not None:
                name = desc.roles[0].name if desc.roles else d.name
                out.append(
                    ListAppResponse(
                        app_id=d.name, state=desc.state, name=d.name.rsplit("-", 1)[0] or name
                    )
                )
        return out

    def _cancel_existing(self, app_id: str) -> None:
        """Leave a ``cancel`` marker, then SIGTERM the supervisor once it is known to handle it
        (it writes state.json only after installing its handler; before that it polls the
        marker)."""
        state_dir = self._app_dir(app_id)
        write_private(state_dir / "cancel", json.dumps({"by": canceller()}))
        found = self._read(app_id)
        if found is None or found[1] is None:
            return
        state = found[1]
        pid, ticks = read_pidfile(state_dir / "supervisor.pid")
        if is_same_process(pid, state.get("supervisor_start_ticks", ticks)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)  # type: ignore[arg-type]
        elif not state.get("final_state"):
            kill_orphans(state)

    def preempt(self, app_id: str, grace: float | None = None) -> None:
        """Preempt the running app as a reclaimed spot machine would: its supervisor sends
        the replicas SIGTERM, SIGKILL after ``grace`` seconds (the scheduler's grace by
        default), records the attempt and runs them again (``preempt`` marker, beside the
        cancel marker)."""
        found = self._read(app_id)
        state = found[1] if found else None
        if found is None:
            raise NotPreemptible(f"local_cwd has no app {app_id!r} to preempt")
        pid, _ = read_pidfile(self._app_dir(app_id) / "supervisor.pid")
        alive = state is not None and is_same_process(pid, state.get("supervisor_start_ticks"))
        if state is None or state.get("final_state") or state["cancelled"] or not alive:
            raise not_running(app_id)
        if state.get("preempting") or (self._app_dir(app_id) / "preempt").exists():
            raise preempting_already(app_id)
        said = {"by": canceller(), "grace": self.grace_seconds if grace is None else grace}
        write_private(self._app_dir(app_id) / "preempt", json.dumps(said))

    def log_file(
        self, app_id: str, role_name: str, k: int = 0, streams: Stream | None = None
    ) -> Path | None:
        return self._log_file(app_id, role_name, k, streams)

    def _log_file(self, app_id: str, role_name: str, k: int, streams: Stream | None) -> Path:
        found = self._read(app_id)
        if found is None:
            raise ValueError(f"unknown app {app_id!r}")
        request, _ = found
        params = request["role_params"].get(role_name)
        if params is None:
            raise ValueError(
                f"app {app_id!r} has no role {role_name!r} (roles: {', '.join(request['role_params'])})"
            )
        if not 0 <= k < len(params):
            raise ValueError(f"role {role_name!r} has replicas 0..{len(params) - 1}, not {k}")
        stream = (streams or Stream.COMBINED).value
        return Path(params[k][stream])

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """Lines of one replica's log file, each a ``LogLine`` with the time the supervisor
        wrote it (from the ``.times`` file beside the log; a log written before that was kept
        gives plain lines); ``since``/``until`` are not supported and are ignored."""
        path = self._log_file(q.app_id, q.role, q.k, q.streams)  # a bad query raises here
        return timed_lines(path, self._follow(q.app_id, path, q.tail))

    def _follow(self, app_id: str, path: Path, should_tail: bool) -> Iterator[str]:
        """The file's lines; with ``should_tail``, on until the job ends. Each idle look asks
        whether the job ended (a describe served from its files' cache: a few stat calls) and
        the looks back off from 2 ms to TAIL_IDLE_S, so an ended job is seen within
        milliseconds of its last line and an idle tail costs a look a second."""

        def terminal() -> bool:
            desc = self.describe(app_id)
            return desc is None or is_terminal(desc.state)

        delay = 0.002
        while not path.exists():
            if not should_tail or terminal() or tail_wait(delay):
                return
            delay = min(delay * 1.5, TAIL_IDLE_S)
        with open(path, encoding="utf-8", errors="replace", newline="") as f:
            lines = LineSplitter()
            delay = 0.002
            while True:
                chunk = f.read(65536)
                if chunk:
                    delay = 0.002
                    yield from lines.feed(chunk)
                    continue
                if not should_tail:
                    break
                if terminal():
                    rest = f.read()
                    if rest:
                        yield from lines.feed(rest)
                        continue
                    break
                if tail_wait(delay):
                    return
                delay = min(delay * 1.5, TAIL_IDLE_S)
            yield from lines.flush()

    def close(self) -> None:
        self._reap(every=0)


def create_scheduler(
    session_name: str,
    state_root: str | os.PathLike[str] | None = None,
    extra_paths: list[str] | None = None,
    grace_seconds: float = 10.0,
) -> LocalCwdScheduler:
    return LocalCwdScheduler(
        session_name, state_root=state_root, extra_paths=extra_paths, grace_seconds=grace_seconds
    )
