"""Where each preemption's next attempt resumed from, read from the job's own checkpoint
ledger (``attempts.json``, written by the job-side runner beside its checkpoint generations):
each attempt says when the program wrote the checkpoint it restored, so status tells "resumed
at 10:05 from the checkpoint of 10:01 — 1 min of work lost" from what really happened.

The ledger is found through the job's output folder (the output store's reading code, so a
local folder, Slurm's shared folder, S3 and GCS alike): the job leaves its store's URL there
(``.torchx-nb/checkpoint.json``: local_cwd, Slurm, local_docker), and aws_batch and gcp_batch
keep the store inside the output folder (``.torchx-nb/checkpoints/``), SageMaker's spot jobs
at ``checkpoints/``. Read lazily (only for a job with a preemption it resumed from) and
bounded (``LEDGER_BYTES``), at most every ``REREAD_S`` while an attempt's entry is missing."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

from torchx_nb.specs.preemption import AttemptLog, Restore

LEDGER_BYTES = 256 * 1024  # a ledger of 20 preemptions is ~4 KB: more is not one of ours
REREAD_S = 10.0
POINTER = ".torchx-nb/checkpoint.json"
LEDGER = "attempts.json"
INSIDE = (".torchx-nb/checkpoints/attempts.json", "checkpoints/attempts.json")


def _json(store: Any, path: str) -> Any:
    """A small JSON file of ``store`` (None when missing, unreadable or too long)."""
    from torchx_nb.results import _read

    try:
        data = _read(store, path, LEDGER_BYTES + 1)
    except Exception:
        return None
    if len(data) > LEDGER_BYTES:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def read_restores(outputs: str) -> list[Restore] | None:
    """What the ledger of the job whose output folder is ``outputs`` says each attempt
    restored; None when no ledger is found there (the job keeps no checkpoint store, or
    its ledger cannot be read from here)."""
    from torchx_nb.results import store_for

    try:
        store = store_for(outputs)
    except Exception:
        return None
    pointer = _json(store, POINTER)
    places: list[tuple[Any, str]] = []
    url = pointer.get("url") if isinstance(pointer, dict) else None
    if isinstance(url, str) and url.startswith(("file://", "s3://", "gs://")):
        with contextlib.suppress(Exception):
            places.append((store_for(url), LEDGER))
    places += [(store, path) for path in INSIDE]
    for where, path in places:
        entries = _json(where, path)
        if isinstance(entries, list):
            return restores(entries)
    return None


def restores(entries: list[Any]) -> list[Restore]:
    """The ledger's entries that say what their attempt restored (a ledger of an earlier
    version does not say: those are left out, so the story says it does not know)."""
    out: list[Restore] = []
    for e in entries:
        if not isinstance(e, dict) or "restored_at" not in e:
            continue
        began, restored = e.get("started"), e.get("restored_at")
        if isinstance(began, (int, float)) and (
            restored is None or isinstance(restored, (int, float))
        ):
            out.append((float(began), None if restored is None else float(restored)))
    return out


class Restores:
    """Each job's ledger, read once it tells every resumed attempt (until then at most every
    ``REREAD_S``)."""

    def __init__(self) -> None:
        self._kept: dict[str, tuple[object, list[Restore] | None, bool, float]] = {}

    def of(
        self, handle: str, outputs: str | None, log: AttemptLog, fresh: bool = False
    ) -> list[Restore]:
        """The restores of the job ``handle`` (``outputs``: its output folder) for ``log``;
        none when nothing resumed or no ledger is found. ``fresh``: read again unless what
        was read told every resumed attempt (an ended job's ledger is final: its story is
        told once, from all of it)."""
        resumed = [e for e in log.events if e.resumed_at is not None]
        if not resumed or not outputs:
            return []
        key = (outputs, tuple((e.at, e.resumed_at) for e in resumed))
        kept = self._kept.get(handle)
        now = time.monotonic()
        if (
            kept is not None
            and kept[0] == key
            and (kept[2] or (not fresh and now - kept[3] < REREAD_S))
        ):
            return kept[1] or []
        found = read_restores(outputs)
        whole = found is not None and all(any(r[0] >= e.at for r in found) for e in resumed)
        self._kept[handle] = (key, found, whole, now)
        return found or []


__all__ = ["LEDGER_BYTES", "Restores", "read_restores", "restores"]
