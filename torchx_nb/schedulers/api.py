"""The scheduler interface every backend implements, mirroring ``torchx.schedulers.api``."""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeAlias, TypeVar, cast

from torchx_nb.schedulers.abilities import (
    DirWorkspaceMixin,
    LocalWorkspace,
    TakesTypedOptions,
    WorkspaceMixin,
)
from torchx_nb.schedulers.logs import filter_regex, split_lines, split_lines_iterator
from torchx_nb.specs.api import (
    NULL_RESOURCE,
    AppDef,
    AppDryRunInfo,
    CfgVal,
    InvalidRunConfigException,
    TorchxNbError,
    as_cfg,
    runopts,
)
from torchx_nb.specs.log_line import Stream
from torchx_nb.specs.responses import DescribeAppResponse, ListAppResponse

T = TypeVar("T")

#: only the options given, by name and cast (``Scheduler.given_opts``): what ``list`` and
#: previews read, where a required option may be missing and no default is filled in
GivenOpts: TypeAlias = Mapping[str, CfgVal]


@dataclass(frozen=True)
class LogQuery:
    """What ``log_iter`` asks a backend's reader for: one replica's lines, a time window,
    whether to follow, which stream."""

    app_id: str
    role: str
    k: int = 0
    since: datetime | None = None
    until: datetime | None = None
    tail: bool = False
    streams: Stream | None = None


class Scheduler(abc.ABC, Generic[T]):
    """A backend: turns an AppDef into its native request (dryrun), submits it (schedule), and
    answers describe/list/cancel/log_iter for the apps it ran. ``is_local`` schedulers run on
    this machine, where asking for a status is cheap, so watchers ask more often.

    What a backend can do beyond this is declared by the ability classes it derives from (the
    Runner checks them with ``isinstance``): ``TakesTypedOptions`` (its options are one typed
    structure), ``WorkspaceMixin`` (patches an image with the workspace),
    ``DirWorkspaceMixin`` (runs from a folder of the workspace), ``DescribesMany``,
    ``KeepsLogFiles``, ``StoresOutputs`` and ``SubmitsArrays``. A scheduler without
    ``TakesTypedOptions`` is called with TorchX 0.7.0's signatures: ``_validate(app, scheduler)``
    and ``list()``, its cfg a plain mapping."""

    is_local: bool = False
    #: what TorchX's ``${rank0_env}`` macro becomes in this backend's requests (the variable
    #: holding rank 0's host), so a dry run's program line shows it as the request does
    rank0_env: str = "TORCHX_RANK0_HOST"

    def __init__(self, backend: str, session_name: str) -> None:
        self.backend = backend
        self.session_name = session_name

    def close(self) -> None:
        """Release resources; idempotent and never raises."""

    def submit(self, app: AppDef, cfg: T, workspace: str | None = None) -> str:
        """Dryrun and schedule in one call (mostly for tests; prefer the Runner, which also
        runs a cell from the workspace as a script). TorchX's entry point: ``cfg`` is resolved
        here, once."""
        opts = self.resolve_opts(cfg)
        folder: LocalWorkspace | None = None
        if workspace and isinstance(self, DirWorkspaceMixin):
            folder = LocalWorkspace(workspace)
        elif workspace and isinstance(self, WorkspaceMixin):
            # TorchX's entry point, which a scheduler written for TorchX overrides
            self.build_workspace_and_update_role(app.roles[0], workspace, cast(Any, opts))
        elif workspace:
            raise TorchxNbError(f"scheduler {self.backend!r} does not take a workspace")
        return self.schedule(self.dryrun_typed(app, opts, folder))

    @abc.abstractmethod
    def schedule(self, dryrun_info: AppDryRunInfo[Any]) -> str:
        """Send the request built by ``submit_dryrun``; returns the app id."""

    def resolve_opts(self, cfg: Any, strict: bool = False) -> T:
        """The one resolver of options (the Runner's, and the adapter of TorchX's entry points
        ``submit``/``submit_dryrun``): ``cfg`` (this scheduler's typed options, returned as
        they are; a mapping, as TorchX code passes one; None) checked against ``run_opts()``:
        defaults filled in, strings cast, required options present; with ``strict`` an unknown
        key is refused, naming the closest option. The typed structure for
        ``TakesTypedOptions`` schedulers, else a dict. What only some options given means
        (``list``, previews) is ``given_opts``'s mapping, not a partial ``T``."""
        typed = self.opts_type if isinstance(self, TakesTypedOptions) else None
        if typed is not None and isinstance(cfg, typed):
            return cast(T, cfg)  # the options type is T: found on Scheduler[T] itself
        given = as_cfg(cfg)
        opts = self.run_opts()
        unknown = opts.unknown_keys(given) if strict else []
        if unknown:
            hint = opts.suggest(unknown[0])
            raise InvalidRunConfigException(
                f"{self.backend} has no option {unknown[0]!r}"
                + (f"; did you mean {hint!r}?" if hint else "")
                + f" (see `torchx-nb runopts {self.backend}`)",
                unknown[0],
                given,
            )
        resolved = opts.resolve(given)
        if typed is not None:
            return cast(T, typed.from_cfg(resolved))
        return cast(T, resolved)  # a scheduler written TorchX's way: Scheduler[Mapping]

    def given_opts(self, cfg: Any) -> GivenOpts:
        """Only the options given in ``cfg`` (typed options, a mapping or None), by name and
        cast, none required and no default filled in: the partial resolution ``list`` and
        previews read (e.g. every queue when none is given)."""
        given = as_cfg(cfg)
        if isinstance(self, TakesTypedOptions):
            return self.opts_type.given(given)
        return {k: v for k, v in given.items() if v is not None}

    def submit_dryrun(
        self, app: AppDef, cfg: T, workspace: LocalWorkspace | None = None
    ) -> AppDryRunInfo[Any]:
        """The native request for ``app``, built without any network call. ``workspace`` is
        the folder a ``DirWorkspaceMixin`` scheduler runs the job from. TorchX's entry point:
        ``cfg`` (a mapping as TorchX passes it, or the typed options) is resolved here."""
        return self.dryrun_typed(app, self.resolve_opts(cfg), workspace)

    def dryrun_typed(
        self, app: AppDef, opts: T, workspace: LocalWorkspace | None = None
    ) -> AppDryRunInfo[Any]:
        """``submit_dryrun`` with the options resolved already (the Runner's call, and
        ``submit``'s): the backend's ``_submit_dryrun`` receives them as they are."""
        if workspace is not None:
            if not isinstance(self, DirWorkspaceMixin):
                raise TorchxNbError(f"scheduler {self.backend!r} does not run from a folder")
            info = self._submit_dryrun_in(app, opts, workspace)
        else:
            info = self._submit_dryrun(app, opts)
        for role in app.roles:
            info = role.pre_proc(self.backend, info)
        info._app = app
        info._cfg = opts  # type: ignore[assignment]  # TorchX's field: a mapping there
        return info

    @abc.abstractmethod
    def _submit_dryrun(self, app: AppDef, cfg: T) -> AppDryRunInfo[Any]: ...

    def run_opts(self) -> runopts:
        """The options this scheduler takes (a ``WorkspaceMixin`` adds its own, unless they
        are part of its typed options already)."""
        opts = self._run_opts()
        if isinstance(self, WorkspaceMixin) and not isinstance(self, TakesTypedOptions):
            opts.update(self.workspace_opts())
        return opts

    def _run_opts(self) -> runopts:
        return runopts()

    @abc.abstractmethod
    def describe(self, app_id: str) -> DescribeAppResponse | None:
        """The app's state and roles, or None when the scheduler does not know it."""

    @abc.abstractmethod
    def list(self, cfg: GivenOpts | None = None) -> list[ListAppResponse]:
        """Apps this scheduler ran (only ours, not every job on the cluster). A
        ``TakesTypedOptions`` scheduler gets the options given (``given_opts``: e.g. one queue,
        or none for every queue); others are called as TorchX 0.7.0 calls them, ``list()``."""

    def exists(self, app_id: str) -> bool:
        return self.describe(app_id) is not None

    @abc.abstractmethod
    def _cancel_existing(self, app_id: str) -> None: ...

    def cancel(self, app_id: str) -> None:
        """Ask the scheduler to stop the app; returns without waiting."""
        if self.exists(app_id):
            self._cancel_existing(app_id)

    def delete(self, app_id: str) -> None:
        """Remove the app (default: cancel it)."""
        if self.exists(app_id):
            self._delete_existing(app_id)

    def _delete_existing(self, app_id: str) -> None:
        self._cancel_existing(app_id)

    #: why ``--streams`` cannot pick a stream (None: the backend keeps stdout and stderr apart)
    combined_only: str | None = None

    def log_iter(
        self,
        app_id: str,
        role_name: str,
        k: int = 0,
        regex: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        should_tail: bool = False,
        streams: Stream | None = None,
    ) -> Iterable[str]:
        """Lines (each ending in a newline) of replica ``k`` of ``role_name``, between
        ``since`` and ``until`` where the backend's log has times; with ``should_tail`` it
        follows the log until the app ends. TorchX's signature, in one place: the stream is
        checked and the regex (RE2) applied here, over the lines the backend's ``_read_log``
        gives. A scheduler written TorchX's way overrides this instead."""
        if streams not in (None, Stream.COMBINED) and self.combined_only:
            raise ValueError(f"{self.combined_only}: drop --streams")
        lines = self._read_log(LogQuery(app_id, role_name, k, since, until, should_tail, streams))
        return filter_regex(regex, lines) if regex else lines

    def _read_log(self, q: LogQuery) -> Iterable[str]:
        """The backend's reader: the lines ``log_iter`` asks for, unfiltered."""
        raise NotImplementedError(f"{self.backend} does not support fetching logs")

    def _pre_build_validate(self, app: AppDef, scheduler: str, cfg: T) -> None:
        """Hook run before the workspace is built (the options are resolved already)."""

    def _validate(self, app: AppDef, scheduler: str, cfg: T | None = None) -> None:
        """Check the app can run here; by default every role needs a resource. The Runner
        passes ``cfg`` to ``TakesTypedOptions`` schedulers only (TorchX 0.7.0's signature is
        ``_validate(app, scheduler)``)."""
        for role in app.roles:
            if role.resource == NULL_RESOURCE:
                raise ValueError(
                    f"no resource for role {role.name!r}: set it with -h NAME or --cpu/--memMB"
                )


__all__ = [  # TorchX's torchx.schedulers.api names, importable from here as there
    "DescribeAppResponse",
    "ListAppResponse",
    "LogQuery",
    "Scheduler",
    "Stream",
    "filter_regex",
    "split_lines",
    "split_lines_iterator",
]
