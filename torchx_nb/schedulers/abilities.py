"""What a backend can do beyond the ``Scheduler`` interface, each declared by an ability class
it derives from (the Runner and the server check them with ``isinstance``). They are named for
what the backend does: ``TakesTypedOptions``, ``DescribesMany``, ``KeepsLogFiles``,
``StoresOutputs``, ``RunsEndHook``, ``SubmitsArrays``; the two workspace abilities keep
TorchX's names: ``WorkspaceMixin`` (the workspace is patched onto the role's image; its code
lives with the workspace builders) and ``DirWorkspaceMixin`` (the job runs from the folder),
which is a ``WorkspaceMixin`` as in TorchX."""

from __future__ import annotations

import abc
import contextlib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from torchx_nb.specs.api import AppDef, AppDryRunInfo, Role, runopts
from torchx_nb.specs.log_line import Stream
from torchx_nb.workspace import WorkspaceMixin, WorkspaceOpts
from torchx_nb.workspace.use import ProgramJob, WorkspaceUse

if TYPE_CHECKING:
    from torchx_nb.specs.responses import DescribeAppResponse
    from torchx_nb.specs.structured_opts import StructuredOpts


OptsT = TypeVar("OptsT")


class TakesTypedOptions(Generic[OptsT]):
    """Ability: the scheduler's options are one typed structure, a ``StructuredOpts``
    dataclass, stated once as the scheduler's generic parameter (``Scheduler[AwsBatchOpts]``)
    and found there as ``opts_type``: its runopts table (and so the CLI help,
    ``.torchxconfig`` and the docs' option tables) comes from it, the Runner builds it once
    from the options given, and the dry run, ``_validate`` and ``list`` read its attributes.

    A backend written to the earlier form still loads as it did: ``TakesTypedOptions[X]``
    is accepted, and an ``opts_type = X`` a class states itself wins over what its bases say
    (a subclass of a built-in backend that adds options of its own)."""

    opts_type: ClassVar[type[StructuredOpts]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = _options_parameter(cls)
        if found is not None:
            cls.opts_type = found

    def _run_opts(self) -> runopts:
        return self.opts_type.as_runopts()


def _options_parameter(cls: type) -> type[StructuredOpts] | None:
    """The ``StructuredOpts`` type nearest ``cls`` in its MRO: one a class states as its
    ``opts_type``, or one it gives a generic base as its parameter (``Scheduler[AwsBatchOpts]``)."""
    from torchx_nb.specs.structured_opts import StructuredOpts

    def options(arg: Any) -> bool:
        return isinstance(arg, type) and issubclass(arg, StructuredOpts)

    for klass in cls.__mro__:
        declared = klass.__dict__.get("opts_type")
        if options(declared):
            return typing.cast(type[StructuredOpts], declared)
        for base in klass.__dict__.get("__orig_bases__", ()):
            for arg in typing.get_args(base):
                if options(arg):
                    return typing.cast(type[StructuredOpts], arg)
    return None


class DescribesMany(abc.ABC):
    """Ability: the status of many jobs in one call (AWS Batch describes 100 per call, GCP
    Batch and Kubernetes list a location or namespace, Slurm asks squeue once)."""

    @abc.abstractmethod
    def describe_many(self, app_ids: list[str]) -> dict[str, DescribeAppResponse | None]:
        """``describe`` of each app id (None for those it does not know)."""


class DefinesMetrics(abc.ABC):
    """Ability: the scheduler's options can name metrics the backend itself reads from the
    job's log (SageMaker's ``metric_definitions``); the notebook charts them beside those the
    magic names."""

    @abc.abstractmethod
    def metric_definitions(self, cfg: Any) -> dict[str, str]:
        """The metrics ``cfg`` (this scheduler's resolved options) defines, ``{NAME: REGEX}``."""


class StoresOutputs(abc.ABC):
    """Ability: each job gets an output folder (``$TORCHX_OUTPUT_DIR``) that is kept where the
    kernel can read it afterwards: a local folder, the Slurm job folder, or an object store the
    job uploads it to (``$TORCHX_NB_OUTPUT_URL``). A cell's result and exception are written
    there, beside the files the job writes."""

    @abc.abstractmethod
    def output_url(self, app_id: str, request: Any) -> str | None:
        """Where the outputs of ``app_id`` (submitted with ``request``) are kept: ``file://``,
        ``s3://`` or ``gs://``; None when the job has none (e.g. no ``output_path``)."""


class RunsEndHook:
    """Ability: the backend has a process of its own at each job's end (local_cwd's
    supervisor), which runs ``end_hook`` (argv, the job's handle appended) once the end is
    recorded: the job-end notice's watcher of last resort. The runner sets it, only when a
    notice is configured."""

    end_hook: list[str] | None = None


class SubmitsArrays(abc.ABC):
    """Ability: the trials of a sweep go as one native array job (Slurm's ``--array``, an AWS
    Batch array job, a Kubernetes Indexed Job, a GCP Batch job's task count): one submit call
    for all of them, and one describe call per poll round. Each task finds its index in the
    variable ``array_index_env`` names; each trial keeps an id of its own (``trial_ids``) that
    describe, logs and cancel take."""

    #: the environment variable holding a task's index in the array
    array_index_env: str = ""
    #: whether the backend bounds how many tasks run at once (``max_parallel``)
    throttles_arrays: bool = False

    def can_array(self, app: AppDef, cfg: Any) -> bool:
        """Whether ``app`` can run as array tasks with options ``cfg`` (by default: one role
        of one replica)."""
        return len(app.roles) == 1 and app.roles[0].num_replicas == 1

    @abc.abstractmethod
    def array_request(
        self, info: AppDryRunInfo[Any], size: int, max_parallel: int | None
    ) -> AppDryRunInfo[Any]:
        """The dry run ``info`` made into an array of ``size`` tasks (at most ``max_parallel``
        at once, where the backend bounds it)."""

    @abc.abstractmethod
    def trial_ids(self, app_id: str, size: int) -> list[str]:
        """The id of each task of the array submitted as ``app_id``, in index order."""

    def array_of(self, trial_id: str) -> str:
        """The id of the array job ``trial_id`` is a task of (by default: all before its
        last ``:``)."""
        return trial_id.rpartition(":")[0]

    def stop_array(self, array_id: str, trial_ids: list[str]) -> bool:
        """Stop, in one call, the tasks of ``array_id`` that have not ended (``trial_ids``:
        those asked for), and return True; False (the default) where the backend has no such
        call, and each trial is cancelled on its own."""
        return False

    def cancel_arrays(self, trial_ids: list[str]) -> None:
        """Cancel every trial of the arrays ``trial_ids`` belong to that has not ended (a
        sweep's Cancel all): one ``stop_array`` per array where the backend has it, else each
        trial on its own, one that cannot be cancelled (it has just ended) not keeping the
        others."""
        arrays: dict[str, list[str]] = {}
        for trial_id in trial_ids:
            arrays.setdefault(self.array_of(trial_id), []).append(trial_id)
        for array_id, trials in arrays.items():
            if self.stop_array(array_id, trials):
                continue
            for trial_id in trials:
                with contextlib.suppress(Exception):
                    self._cancel_existing(trial_id)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class LocalWorkspace:
    """The folder a ``DirWorkspaceMixin`` job runs from, and files generated for the job (the
    cell as a script) to write beside it when the scheduler copies the folder."""

    path: str
    files: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class FolderWorkspace(WorkspaceUse):
    """The workspace as the folder the job runs from (``DirWorkspaceMixin``): ``folder`` is
    what the request is built from."""

    folder: LocalWorkspace


def files_beside(root: Path, files: Mapping[str, bytes], write: bool) -> Path:
    """A private folder under ``root`` holding ``files``, named by their content (so
    reused), for a program that runs in place; written only when ``write`` (a run, not a dry
    run)."""
    import hashlib
    import os
    import shutil

    from torchx_nb.paths import private_dir

    digest = hashlib.sha256()
    for name, data in sorted(files.items()):
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    folder = root / digest.hexdigest()[:24]
    if write and not folder.is_dir():
        private_dir(root)
        tmp = private_dir(folder.with_name(f"{folder.name}.{os.getpid()}.tmp"))
        for name, data in files.items():
            target = tmp / name
            target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            target.write_bytes(data)
            os.chmod(target, 0o600)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process made it first, with the same content
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


class DirWorkspaceMixin(abc.ABC, WorkspaceMixin[None]):
    """Ability: the job runs from a folder, no image (local_cwd in the workspace itself; Slurm
    in it, or in a copy under ``job_dir`` on the shared filesystem): TorchX's name for Slurm's
    job_dir workspace. A ``WorkspaceMixin``, as TorchX's is, whose workspace is handed to the
    request as the folder (``_submit_dryrun_in``) instead of being patched onto an image:
    it has no image options, and ``build_workspace_and_update_role`` leaves the role as it is."""

    def workspace_opts(self) -> runopts:
        return runopts()

    def build_workspace_and_update_role(
        self, role: Role, workspace: str, cfg: Mapping[str, Any]
    ) -> None:
        """Nothing to build: the job runs from the folder itself."""

    def copies_workspace(self, cfg: Any) -> bool:
        """Whether the folder is copied for the job (then a cell runs as a script file written
        beside the copy)."""
        return False

    def preview_workspace(self, workspace: str, cfg: Any = None) -> str | None:
        """What would be copied, for dry runs (None: nothing is, the job runs in place)."""
        return None

    def files_folder(self, workspace: str, cfg: Any) -> Path:
        """Where the files generated for a job that runs in place go (the cell runner, the
        cell, pushed variables): where the job can read them, and private. By default a
        folder of this machine's data dir."""
        from torchx_nb.paths import data_dir

        return data_dir() / "cells"

    def use_workspace(
        self, app: AppDef, workspace: str, cfg: Any, job: ProgramJob, build: bool
    ) -> FolderWorkspace:
        """Use ``workspace`` as the folder the job runs from: the program's files go into
        the copy (``copies_workspace``) or, for a job that runs in place, into a private
        folder of their own (``files_folder``, written for a run only), and its role is
        pointed at them."""
        copied: dict[str, bytes] = {}
        if job.role is not None:
            files = job.files()
            if self.copies_workspace(cfg):
                copied.update(files)
                job.point(job.role, "")
            else:
                here = files_beside(self.files_folder(workspace, cfg), files, build)
                job.point(job.role, str(here))
        folder = LocalWorkspace(str(Path(workspace).expanduser().resolve()), copied)
        preview = None if build else self.preview_workspace(workspace, cfg)
        return FolderWorkspace(workspace, preview, job.role is not None, folder)

    def _submit_dryrun(self, app: AppDef, cfg: Any) -> AppDryRunInfo[Any]:
        return self._submit_dryrun_in(app, cfg, None)

    @abc.abstractmethod
    def _submit_dryrun_in(
        self, app: AppDef, cfg: Any, workspace: LocalWorkspace | None
    ) -> AppDryRunInfo[Any]:
        """The request for ``app`` run from ``workspace`` (None: the current folder)."""


class Preemptible(abc.ABC):
    """Ability: the backend can preempt a running job on request the way its capacity would
    (``torchx-nb preempt``, ``job.preempt()``): SIGTERM, ``grace`` seconds, the kill, then its
    own retry of a preempted job (local_cwd and local_docker run it again, Slurm's
    ``scontrol requeue``, a Kubernetes eviction). Its ``describe`` then lists the preemption
    in ``DescribeAppResponse.preemptions``, as for one its capacity made."""

    #: the seconds between the SIGTERM and the kill when none is asked for (Slurm's GraceTime,
    #: SageMaker's 120 s, a pod's terminationGracePeriodSeconds)
    preempt_grace: ClassVar[float] = 30.0

    #: why a grace asked for is not honoured (a backend that kills after its own grace, as
    #: Slurm's KillWait); empty when it is
    grace_ignored: ClassVar[str] = ""

    @abc.abstractmethod
    def preempt(self, app_id: str, grace: float) -> None:
        """Preempt the running job ``app_id``, its program getting ``grace`` seconds after the
        SIGTERM; returns once the preemption is under way. ``NotPreemptible`` (one line) when
        it cannot be (it is not running)."""


class SubmitsAgain(abc.ABC):
    """Ability: the backend can send a job it ran before again, as a new native job, from what
    it keeps of it (Slurm the batch script in the job's folder): how a preempted job that its
    backend will not run again (``DescribeAppResponse.ended_preempted``) is resubmitted by a
    process other than the one that submitted it."""

    @abc.abstractmethod
    def submit_again(self, app_id: str) -> str:
        """Submit the job ``app_id`` again; the new native id. (A backend that also
        ``StoresOutputs`` keeps the new job's outputs where the first's were, its native id in
        place of the first's: that is where the runner looks for its result.)"""


class KeepsLogFiles(abc.ABC):
    """Ability: a replica's log is one file on this machine, so its tail can be read from the
    end instead of from the start (the REST API's ``tail=N``)."""

    @abc.abstractmethod
    def log_file(
        self, app_id: str, role_name: str, k: int = 0, streams: Stream | None = None
    ) -> Path | None:
        """The file holding that log, or None when there is no single file for it."""


__all__ = [
    "DescribesMany",
    "DirWorkspaceMixin",
    "FolderWorkspace",
    "KeepsLogFiles",
    "LocalWorkspace",
    "Preemptible",
    "RunsEndHook",
    "StoresOutputs",
    "SubmitsAgain",
    "SubmitsArrays",
    "TakesTypedOptions",
    "WorkspaceMixin",
    "WorkspaceOpts",
]
