"""Where a job's outputs go and what a backend remembers of a cancel: the output folder's
environment, an object-store upload target, an array task's folder, the checkpoint store's
environment, and the private cancel marks."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

OUTPUT_DIR_ENV = "TORCHX_OUTPUT_DIR"
OUTPUT_URL_ENV = "TORCHX_NB_OUTPUT_URL"


def upload_target(output_path: str | None, name: str, schemes: tuple[str, ...]) -> str | None:
    """The URL a remote job uploads its output folder to: ``output_path/NAME/`` (None without
    an ``output_path``); a scheme the backend cannot use is one line naming the ones it can."""
    if not output_path:
        return None
    scheme = output_path.partition("://")[0]
    if "://" not in output_path or scheme not in schemes or not output_path.split("://")[1]:
        from torchx_nb.specs.api import InvalidRunConfigException

        raise InvalidRunConfigException(
            f"output_path {output_path!r} is not an object-store URL: use "
            + " or ".join(f"{s}://BUCKET/PREFIX" for s in schemes),
            "output_path",
        )
    return f"{output_path.rstrip('/')}/{name}/"


def output_env(folder: str, url: str | None) -> dict[str, str]:
    """The job's env for its output folder (and, for a remote job, where to upload it)."""
    return {OUTPUT_DIR_ENV: folder, **({OUTPUT_URL_ENV: url} if url else {})}


REMOTE_OUTPUT_DIR = "/tmp/torchx-outputs"
REMOTE_CHECKPOINT_DIR = "/tmp/torchx-checkpoint"  # the local folder in a remote container


def checkpoint_url(outputs: str) -> str:
    """The checkpoint store of a job that uploads its outputs to ``outputs``: under the
    runner's own ``.torchx-nb/`` there, so the job's output files (``job.outputs()``, the
    downloads) stay the program's own."""
    return f"{outputs.rstrip('/')}/.torchx-nb/checkpoints"


def checkpoint_env(
    url: str,
    folder: str = REMOTE_CHECKPOINT_DIR,
    attempt_var: str | None = None,
    max_retries: int | None = None,
    max_preemptions: int | None = None,
    grace: float | None = None,
    reclaims_named: bool = False,
) -> dict[str, str]:
    """The job's env for its checkpoint (the cell runner's ``checkpoint`` reads it): the store's
    ``url`` (``file://``, ``s3://``, ``gs://``, or ``sagemaker:``), the local ``folder``
    the rank folders are made in (SageMaker: its ``CheckpointConfig`` LocalPath), the name
    of the backend's own attempt variable, the job's retry and preemption limits, the
    seconds between its SIGTERM and its kill, and whether the backend names each attempt it
    stopped (``reclaims_named``: local_cwd's supervisor)."""
    from torchx_nb.apps.cell_runner import checkpoint as ck

    env = {ck.URL_ENV: url, ck.DIR_ENV: folder}
    if attempt_var:
        env[ck.ATTEMPT_ENV_ENV] = attempt_var
    if max_retries is not None:
        env[ck.MAX_RETRIES_ENV] = str(max_retries)
    if max_preemptions is not None:
        env[ck.MAX_PREEMPTIONS_ENV] = str(max_preemptions)
    if grace is not None:
        env[ck.GRACE_ENV] = f"{grace:g}"
    if reclaims_named:
        env[ck.RECLAIMS_NAMED_ENV] = "1"
    return env


def counts_failures(env_names: Iterable[str]) -> bool:
    """Whether a job whose environment has ``env_names`` keeps a checkpoint ledger that counts
    its failures against max_retries: the store and the job's max_retries, as
    ``checkpoint_env`` writes them for ``output_path``. A store of the user's own
    (``TORCHX_NB_CHECKPOINT_URL`` in the role's env) keeps a ledger that knows no max_retries."""
    from torchx_nb.apps.cell_runner import checkpoint as ck

    return {ck.URL_ENV, ck.MAX_RETRIES_ENV} <= set(env_names)


#: a sweep trial sent again as a job of its own: its index (the array's own variable is the
#: backend's, which a job outside an array has not), and the variable the cell runner reads it
#: from names it (``$TORCHX_NB_TRIAL_FROM``)
TRIAL_INDEX_ENV = "TORCHX_NB_TRIAL_INDEX"


def trial_env(index: str) -> dict[str, str]:
    """The env of a sweep's trial ``index`` sent again as a job of its own."""
    return {TRIAL_INDEX_ENV: index, "TORCHX_NB_TRIAL_FROM": TRIAL_INDEX_ENV}


_COUNT = re.compile(r"[0-9]{1,9}")


def budget_count(values: Mapping[str, str], key: str) -> int:
    """The whole number of ``values[key]`` (a job's budget tag or label); 0 when it is missing
    or not one (edited by hand, a job of an earlier version or made elsewhere: what is left is
    unknown, so none is — never more than the job had)."""
    value = str(values.get(key, "")).strip()
    return int(value) if _COUNT.fullmatch(value) else 0


def cancel_mark(backend: str, app_id: str) -> Path:
    """A private file saying we cancelled ``app_id`` on ``backend``: what the backend's API
    cannot tell afterwards (a deleted Kubernetes job is gone; a GCP Batch task has no cancel of
    its own) stays known to every later describe on this machine."""
    from torchx_nb.paths import data_dir

    return data_dir() / backend / "cancelled" / app_id.replace(":", "_").replace("/", "_")


def mark_cancelled(backend: str, app_id: str, by: str = "") -> None:
    """Leave the mark; ``by``: who cancelled (``cancellers.canceller``), said by describe."""
    import json

    from torchx_nb.paths import private_dir, write_private

    mark = cancel_mark(backend, app_id)
    private_dir(mark.parent)
    write_private(mark, json.dumps({"by": by}) if by else "")


def marked_by(backend: str, app_id: str) -> str:
    """Who the cancel mark of ``app_id`` says cancelled it ('' when it names nobody)."""
    import json

    try:
        said = json.loads(cancel_mark(backend, app_id).read_text() or "{}").get("by")
    except (OSError, ValueError, AttributeError):
        return ""
    from torchx_nb.schedulers.cancellers import clean_who

    return clean_who(str(said)) if said else ""


def marked_ending(backend: str, app_id: str) -> str:
    """``was cancelled by WHO`` for a job torchx_nb's cancel marked (the mark says for whom);
    '' for one it did not."""
    if not cancel_mark(backend, app_id).exists():
        return ""
    from torchx_nb.schedulers.cancellers import cancelled_by

    return cancelled_by(marked_by(backend, app_id))


def trial_output(base: str | None, index: int) -> str | None:
    """Where array task ``index`` keeps its outputs: a folder of the array's (the cell runner
    writes and uploads there)."""
    return None if base is None else f"{base.rstrip('/')}/{index}/"
