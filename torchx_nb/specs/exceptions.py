"""Every error this package raises on purpose, in one tree (TorchX's names kept, and each
importable where it was documented: ``torchx_nb.specs.api``, the module that raises it), and the
one table, ``ANSWERS``, saying what each means at the edges: the REST API's HTTP status and the
CLI's exit code. Each error names what to do in one line. The server's handlers and the CLI map
errors only through ``http_status`` and ``exit_status``."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any


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


class JobStoreError(TorchxNbError):
    """The job store cannot be read or written; the message names the file and the fix."""


class NoResult(TorchxNbError):
    """The job ended without a result (killed, out of memory, cancelled, no output store)."""


class AppStatusError(TorchxNbError):
    """Raised by ``AppStatus.raise_for_status`` when an app did not succeed (``status``: its
    ``AppStatus``)."""

    def __init__(self, status: Any, *args: object) -> None:
        super().__init__(*args)
        self.status = status


class LocalImageWithoutRepo(InvalidRunConfigException, KeyError):
    """A local image and no ``image_repo`` to push it to: a ``KeyError`` too, as TorchX raises
    there, so ``except KeyError`` still catches it; its message reads unquoted."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownNamedResourceError(TorchxNbError, KeyError):
    """No named resource has that name; the message suggests the closest one."""

    def __str__(self) -> str:
        return str(self.args[0])


# -- what the user gave ------------------------------------------------------------------------


class CliError(TorchxNbError):
    """Bad command-line usage."""


class ComponentNotFoundError(TorchxNbError):
    """No component has that name."""


class ComponentArgError(TorchxNbError):
    """A component was given arguments it does not accept."""


class ComponentValidationException(Exception):
    """A component breaks the linter's rules (TorchX's name)."""


class BadJobSizeError(TorchxNbError, ValueError):
    """``-j`` is not of the form ``[MIN:]NxP`` or ``P``."""


class AppValidationError(TorchxNbError, ValueError):
    """The AppDef cannot run anywhere (no entrypoint, no replicas, no roles)."""


class BadGrid(TorchxNbError):
    """A grid that cannot run: the message is one line naming the fix."""


class BadRegex(TorchxNbError, ValueError):
    """A regex the engine cannot compile; the message says why in one line."""


class ConfigError(TorchxNbError):
    """A .torchxconfig file cannot be read."""


class ConfigNotFoundError(ConfigError, FileNotFoundError):
    """``$TORCHXCONFIG`` names a file that does not exist (a FileNotFoundError, as in TorchX)."""


class NotifyError(TorchxNbError):
    """The notice URL cannot be used."""


class WebhookAnswer(NotifyError):
    """The webhook answered, but did not take the notice (an error status, or a redirect that
    would not carry the POST); ``final``: trying again will not help (a 301/302/303)."""

    def __init__(self, message: str, final: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.final = final
        self.retry_after = retry_after  # seconds the webhook asked us to wait (429/503)


class RefresherSettingsError(TorchxNbError, ValueError):
    """The process's refresher was asked for settings other than those it runs with."""


# -- the REST API's requests -------------------------------------------------------------------


class BadRequest(TorchxNbError, ValueError):
    """A REST request the server refuses before doing anything: the one line names the
    parameter or field."""


class DoesNotConform(BadRequest):
    """A value the document refuses: the one-line reason names the parameter or field."""


class BadSubmission(BadRequest):
    """The body cannot be run: the one-line reason names the field."""


class BadCursor(BadRequest):
    """An ``after`` cursor that no jobs page gave."""


class BadEventId(BadRequest):
    """A malformed Last-Event-ID (not ``EPOCH.N``)."""


class NoSuchJob(TorchxNbError, LookupError):
    """The job store holds no such job (or no such output of it)."""


class JobEnded(TorchxNbError):
    """Cancel of a job that has already ended: nothing was done."""

    def __init__(self, handle: str, state: str) -> None:
        super().__init__(f"{handle} has already ended ({state}); there is nothing to cancel")
        self.state = state


class NotPreemptible(TorchxNbError):
    """``preempt`` of a job whose backend cannot preempt on request, or that is not running:
    nothing was done; the one line says what to do instead."""


class ServerFailed(TorchxNbError):
    """The server itself could not do what was asked (HTTP 500)."""


class UpstreamError(TorchxNbError):
    """What the server asked of a scheduler or an output store failed (HTTP 502)."""


class UpstreamUnavailable(UpstreamError):
    """A scheduler cannot be reached or used here at all: not installed, unreachable,
    unknown (HTTP 503)."""


# -- jobs, their replicas and their results ----------------------------------------------------


class NoSuchReplica(TorchxNbError, LookupError):
    """The job has no such role, or no such replica of it."""


class RemoteError(TorchxNbError):
    """The cell raised an exception the kernel cannot rebuild (its type is not importable here,
    or it could not be pickled): its type and message."""


# -- the machine, the workspace and the backends -----------------------------------------------


class UnsafePathError(TorchxNbError, PermissionError):
    """A state folder or file is not the user's own, or others may write to it."""


class WorkspaceError(TorchxNbError):
    """The workspace cannot be packaged (missing, too large, unreadable)."""


class DockerUnavailableError(TorchxNbError):
    """No Docker daemon answers (HTTP 503)."""


class RegistryError(TorchxNbError):
    """A registry refused or could not be reached."""


class RegistryUnreachable(RegistryError):
    """No registry answers at the image's host and port (HTTP 503)."""


class AwsError(TorchxNbError):
    """An AWS call failed in a way the user can fix."""


class AwsUnavailable(AwsError):
    """The AWS endpoint cannot be reached, or throttles even after retries (HTTP 503)."""


class GcpError(TorchxNbError):
    """A GCP call failed in a way the user can fix; ``reason`` is the API error's class name
    (``NotFound``, ``PermissionDenied``...) when there was one."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class GcpUnreachable(GcpError):
    """Google's API cannot be reached (HTTP 503)."""


class KubernetesError(TorchxNbError):
    """A Kubernetes call failed in a way the user can fix."""


class KubernetesUnreachable(KubernetesError):
    """The Kubernetes API server cannot be reached (HTTP 503)."""


class SlurmError(TorchxNbError):
    """A Slurm command failed; the message is one line with Slurm's own words."""


class RemoteTraceback(Exception):
    """The job's traceback, set as the cause of the exception ``result()`` raises, so IPython
    (and Python) show it above the kernel's own, as ``concurrent.futures`` does."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n" + self.text


class BadParameter(ValueError):
    """A parameter that cannot run: shown as ``-p NAME: why`` (the CLI's and Python's words);
    the REST API names its field, ``parameters.NAME: why``."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"-p {name}: {why}")
        self.name, self.why = name, why


# -- the one table: what an error means at the edges ------------------------------------------
# (HTTP status of the REST API, exit code of the CLI) and the errors that mean it; the nearest
# class of an error's MRO that is listed decides. An error listed nowhere: the CLI exits 1, and
# the server answers for the failure of what it asked (``UpstreamError``, 502, unless the
# endpoint says 503).
_MEANINGS: tuple[tuple[int, int, tuple[type[BaseException], ...]], ...] = (
    (400, 2, (BadRequest, BadRegex, CliError, ComponentArgError)),
    (404, 1, (UnknownAppException, NoSuchJob, NoSuchReplica, NoResult)),
    (409, 1, (JobEnded, NotPreemptible)),
    (500, 1, (JobStoreError, ServerFailed)),
    (502, 1, (UpstreamError,)),
    (503, 1, (UpstreamUnavailable, DockerUnavailableError, RegistryUnreachable)),
    (503, 1, (AwsUnavailable, GcpUnreachable, KubernetesUnreachable)),
)
ANSWERS: dict[type[BaseException], tuple[int, int]] = {
    klass: (status, code) for status, code, classes in _MEANINGS for klass in classes
}


def _answer(e: BaseException) -> tuple[int, int] | None:
    for klass in type(e).__mro__:
        if klass in ANSWERS:
            return ANSWERS[klass]
    return None


def http_status(e: BaseException) -> int | None:
    """The REST API's status for ``e`` (None: not one the table lists)."""
    found = _answer(e)
    return found[0] if found else None


def exit_status(e: BaseException) -> int:
    """The CLI's exit code for ``e``: 2 for a usage error, else 1."""
    found = _answer(e)
    return found[1] if found else 1


def refuses(e: BaseException) -> bool:
    """Whether ``e``, raised while a request is checked (a dry run, before anything is built),
    says that the request cannot run: one of our errors, or a ``ValueError``, that the table
    does not call the failure of something the check needed (a backend, registry or daemon
    that does not answer: a 5xx). A refusal is the caller's to fix (a 400); anything else
    is an outage, answered by the table."""
    status = http_status(e)
    return (status is None or status < 500) and isinstance(e, (TorchxNbError, ValueError))


class TrialsNotCancelled(TorchxNbError):
    """``Sweep.cancel`` could not cancel these trials (``failed``: index, handle, why), which
    may still run; every other trial was cancelled. Its text is one line per trial."""

    def __init__(self, sweep_id: str, failed: list[tuple[int, str, str]]) -> None:
        super().__init__(
            "\n".join(
                f"{sweep_id}: trial {i} ({handle}) could not be cancelled and may still run: {why}"
                for i, handle, why in failed
            )
        )
        self.failed = failed


class SweepPartlySubmitted(TorchxNbError):
    """A sweep stopped at a trial that could not be submitted: the trials before it were
    submitted and run on (``sweep`` holds them; ``trial``, the one that failed; ``why``, its
    error's one line)."""

    def __init__(self, sweep: Any, trial: int, why: str) -> None:
        submitted = [i for i, h in enumerate(sweep.handles) if h is not None]
        n = len(sweep.points)
        super().__init__(
            f"{sweep.id}: trial {trial} could not be submitted: {why};"
            f" {_trials(submitted)} of {n} were submitted and run on (cancel them:"
            f" %torchx cancel {sweep.id}, or torchx-nb cancel {sweep.id});"
            f" {_trials(list(range(trial, n)))} were not"
        )
        self.sweep = sweep
        self.trial = trial


def _trials(indexes: list[int]) -> str:
    """``trials 0-2, 5`` (``trial 3``): trial indexes as runs."""
    runs: list[list[int]] = []
    for i in indexes:
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"trial {text}" if len(indexes) == 1 else f"trials {text}"
