"""The job store's attempts: every run of a job's program under its one handle (a requeue keeps
the native id, a resubmission gets a new one), how each ended, and the job's counts of
preemptions and program failures.

Part of the job store (``JobStore`` derives ``AttemptRecords``): the same file, the same change
counter. Every write of attempts moves the counter once, on the attempts written and on their
job's record, so a watcher following ``changes()`` sees the job change (DESIGN: by counter,
never by time); one that comes with a write of the job's state shares that write's value. The
writes that read before they write run in one ``BEGIN IMMEDIATE`` transaction: several
watchers (a kernel, the server, the CLI) see the same preemption, and it is recorded once; only
one of them gets to submit the next attempt (``claim_attempt``)."""

from __future__ import annotations

import abc
import sqlite3
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager

from torchx_nb.specs.preemption import Attempt, AttemptLog, Preemption

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    handle TEXT NOT NULL,
    n INTEGER NOT NULL,
    app_id TEXT NOT NULL,
    started REAL,
    ended REAL,
    ended_why TEXT NOT NULL DEFAULT 'running',
    native TEXT NOT NULL DEFAULT '',
    ckpt_at REAL,
    claimed REAL,
    rev INTEGER,
    PRIMARY KEY (handle, n)
);
"""
#: the job's columns of its attempts, added to a store of an earlier version
JOB_COLUMNS = {
    "attempt": "INTEGER NOT NULL DEFAULT 1",
    "preemptions": "INTEGER NOT NULL DEFAULT 0",
    "failures": "INTEGER NOT NULL DEFAULT 0",
    "max_preemptions": "INTEGER",
}
CLAIM_SECONDS = 300.0  # a claim whose submitter vanished is free again after this
_ENDED_WHY = {"SUCCEEDED": "succeeded", "FAILED": "failed", "CANCELLED": "cancelled"}
_REV = "(SELECT value FROM meta WHERE key = 'rev')"
FIRST = (
    "INSERT OR IGNORE INTO attempts (handle, n, app_id, started, rev)"
    f" SELECT handle, 1, app_id, started, {_REV} FROM jobs WHERE handle = ?"
)


def bump(db: sqlite3.Connection, handle: str) -> None:
    """One change of ``handle``'s attempts: the store's counter moves on, and the job's record
    carries it (what watchers follow); the attempts written after it in the same transaction
    carry it too (``_REV``)."""
    db.execute("UPDATE meta SET value = value + 1 WHERE key = 'rev'")
    db.execute(f"UPDATE jobs SET rev = {_REV} WHERE handle = ?", (handle,))


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(
        row["n"],
        row["app_id"],
        row["started"],
        row["ended"],
        row["ended_why"],
        row["native"],
        row["ckpt_at"],
    )


def note_state(
    db: sqlite3.Connection, handle: str, state: str, started: float | None, ended: float | None
) -> None:
    """What a state written by ``update_state`` says of the current attempt: running since
    ``started`` (a later attempt's start is never before its previous one ended: else, now; an
    end seen without its RUNNING keeps the start its scheduler gave), or ended (``ended``) as
    the job did."""
    row = db.execute("SELECT attempt FROM jobs WHERE handle = ?", (handle,)).fetchone()
    if row is None:
        return
    n = int(row[0] or 1)
    if n == 1:
        db.execute(FIRST, (handle,))
    now = time.time()
    why = _ENDED_WHY.get(state)
    if state == "RUNNING" or (why is not None and started is not None):
        prev = db.execute(
            "SELECT ended FROM attempts WHERE handle = ? AND n = ?", (handle, n - 1)
        ).fetchone()
        since = started if started is not None else now
        if prev is not None and prev[0] is not None and since < prev[0]:
            since = now
        db.execute(
            f"UPDATE attempts SET started = ?, rev = {_REV} WHERE handle = ? AND n = ?"
            " AND started IS NULL",
            (since, handle, n),
        )
    if why is not None:
        cur = db.execute(
            f"UPDATE attempts SET ended = ?, ended_why = ?, rev = {_REV} WHERE handle = ?"
            " AND n = ? AND ended_why = 'running'",
            (ended or now, why, handle, n),
        )
        if why == "failed" and cur.rowcount:
            db.execute("UPDATE jobs SET failures = failures + 1 WHERE handle = ?", (handle,))


class AttemptRecords(abc.ABC):
    """The attempts part of ``JobStore``, which gives it the store's connections."""

    @abc.abstractmethod
    def _connect(self, make: bool = True) -> AbstractContextManager[sqlite3.Connection]:
        """A connection to the store, its errors mapped (``JobStore._connect``)."""

    def _transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        from contextlib import contextmanager

        @contextmanager
        def run() -> Iterator[sqlite3.Connection]:
            with self._connect() as db:
                db.row_factory = sqlite3.Row
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")

        return run()

    def attempts(self, handle: str) -> list[Attempt]:
        """Every attempt of ``handle``, the first first (one attempt, from the job's own
        record, for a job that never had another)."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT * FROM attempts WHERE handle = ? ORDER BY n", (handle,)
            ).fetchall()
            if not rows:
                job = db.execute(
                    "SELECT app_id, started, ended, state FROM jobs WHERE handle = ?", (handle,)
                ).fetchone()
                if job is None:
                    return []
                why = _ENDED_WHY.get(job["state"], "running")
                return [Attempt(1, job["app_id"], job["started"], job["ended"], why)]
        return [_attempt(r) for r in rows]

    def attempt_log(self, handle: str) -> AttemptLog:
        """The story of ``handle``'s attempts."""
        return AttemptLog.of(self.attempts(handle))

    def current_ids(self, handles: list[str]) -> dict[str, str]:
        """The native id of each handle's current attempt, for the handles the store knows."""
        out: dict[str, str] = {}
        with self._connect() as db:
            for i in range(0, len(handles), 500):
                chunk = handles[i : i + 500]
                marks = ", ".join("?" * len(chunk))
                out.update(
                    db.execute(
                        f"SELECT handle, app_id FROM jobs WHERE handle IN ({marks})", chunk
                    ).fetchall()
                )
        return out

    def record_preemptions(
        self, handle: str, app_id: str, preemptions: list[Preemption], ended: bool = False
    ) -> int:
        """Keep the preemptions the backend lists for the native job ``app_id`` (oldest first)
        as attempts of ``handle``: each one not yet kept ends the current attempt
        ``preempted`` and begins the next on the same native job (running from its
        ``resumed_at``) — but the last one when the native job ``ended`` with it (its next
        attempt is a resubmission, ``claim_attempt``). A describe of a native job that is no
        longer the current attempt's changes nothing. Returns the job's preemptions."""
        with self._transaction() as db:
            db.execute(FIRST, (handle,))
            rows = [
                _attempt(r)
                for r in db.execute(
                    "SELECT * FROM attempts WHERE handle = ? ORDER BY n", (handle,)
                ).fetchall()
            ]
            current = rows[-1] if rows else None
            if current is not None and current.app_id == app_id:
                self._keep(db, handle, current, rows, preemptions, ended)
            total = db.execute(
                "SELECT preemptions FROM jobs WHERE handle = ?", (handle,)
            ).fetchone()
        return int(total[0]) if total else 0

    @staticmethod
    def _keep(
        db: sqlite3.Connection,
        handle: str,
        current: Attempt,
        rows: list[Attempt],
        preemptions: list[Preemption],
        ended: bool,
    ) -> None:
        kept = sum(r.ended_why == "preempted" and r.app_id == current.app_id for r in rows)
        new = preemptions[kept:]
        before = rows[-2] if len(rows) > 1 else None
        if (
            ended
            and not new
            and current.started is None
            and before is not None
            and before.app_id == current.app_id
            and before.ended_why == "preempted"
        ):
            # the next attempt seen coming (the preemption was told while the job ran) never
            # ran on this native job: it ended with the preemption instead
            bump(db, handle)
            db.execute("DELETE FROM attempts WHERE handle = ? AND n = ?", (handle, current.n))
            db.execute("UPDATE jobs SET attempt = ? WHERE handle = ?", (before.n, handle))
            return
        resumed = preemptions[kept - 1].resumed_at if 0 < kept <= len(preemptions) else None
        resumes = resumed is not None and current.started is None and current.n > 1
        if not new and not resumes:
            return
        bump(db, handle)
        if resumes:  # a preemption kept before, whose next attempt has run since
            db.execute(
                f"UPDATE attempts SET started = ?, rev = {_REV} WHERE handle = ? AND n = ?",
                (resumed, handle, current.n),
            )
        n = current.n
        for i, p in enumerate(new):
            db.execute(
                "UPDATE attempts SET ended = ?, ended_why = 'preempted', native = ?,"
                f" ckpt_at = COALESCE(?, ckpt_at), rev = {_REV} WHERE handle = ? AND n = ?",
                (p.at, p.why, p.ckpt_at, handle, n),
            )
            db.execute("UPDATE jobs SET preemptions = preemptions + 1 WHERE handle = ?", (handle,))
            if ended and i == len(new) - 1:
                break
            n += 1
            db.execute(
                "INSERT INTO attempts (handle, n, app_id, started, rev)"
                f" VALUES (?, ?, ?, ?, {_REV})",
                (handle, n, current.app_id, p.resumed_at),
            )
            db.execute("UPDATE jobs SET attempt = ? WHERE handle = ?", (n, handle))

    def claim_attempt(self, handle: str, n: int) -> bool:
        """Take the submission of attempt ``n`` of ``handle``: True for one caller only
        (across processes), until it is started; a claim left by a submitter that vanished is
        free again after ``CLAIM_SECONDS``."""
        now = time.time()
        with self._transaction() as db:
            try:
                db.execute(
                    "INSERT INTO attempts (handle, n, app_id, claimed) VALUES (?, ?, '', ?)",
                    (handle, n, now),
                )
                return True
            except sqlite3.IntegrityError:
                cur = db.execute(
                    "UPDATE attempts SET claimed = ? WHERE handle = ? AND n = ? AND app_id = ''"
                    " AND claimed < ?",
                    (now, handle, n, now - CLAIM_SECONDS),
                )
                return cur.rowcount == 1

    def start_attempt(
        self, handle: str, n: int, app_id: str, msg: str = "", outputs: str | None = None
    ) -> bool:
        """Attempt ``n`` (claimed) was submitted as the native job ``app_id``: it is the
        current attempt, and the handle now answers for that job (SUBMITTED, with ``msg``;
        ``outputs``: the new job's output folder, where its result is). False, and nothing
        written, when the job ended meanwhile (cancelled while it was being sent): the new
        native job is then the caller's to stop."""
        with self._transaction() as db:
            # the state write moves the counter (the jobs trigger); the attempt carries it
            cur = db.execute(
                "UPDATE jobs SET app_id = ?, attempt = ?, state = 'SUBMITTED', msg = ?,"
                " updated = ?, outputs = COALESCE(?, outputs)"
                " WHERE handle = ? AND state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')",
                (app_id, n, msg, time.time(), outputs, handle),
            )
            if not cur.rowcount:
                db.execute(
                    "DELETE FROM attempts WHERE handle = ? AND n = ? AND app_id = ''", (handle, n)
                )
                return False
            db.execute(
                f"UPDATE attempts SET app_id = ?, claimed = NULL, rev = {_REV}"
                " WHERE handle = ? AND n = ?",
                (app_id, handle, n),
            )
        return True

    def drop_claim(self, handle: str, n: int) -> None:
        """Give up the claim of attempt ``n`` (its submission failed)."""
        with self._connect() as db:
            db.execute(
                "DELETE FROM attempts WHERE handle = ? AND n = ? AND app_id = ''", (handle, n)
            )

    def end_current(self, handle: str, why: str, native: str = "") -> None:
        """End the job's current attempt, if it runs, as ``why`` (one of ``ENDED_WHY``) with
        the words ``native``: one the runner stopped (past its preemption limit) is no failure
        of the program."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT a.n FROM attempts a JOIN jobs j ON j.handle = a.handle AND j.attempt = a.n"
                " WHERE a.handle = ? AND a.ended_why = 'running'",
                (handle,),
            ).fetchone()
            if row is None:
                return
            bump(db, handle)
            db.execute(
                f"UPDATE attempts SET ended = ?, ended_why = ?, native = ?, rev = {_REV}"
                " WHERE handle = ? AND n = ?",
                (time.time(), why, native, handle, row[0]),
            )

    def set_max_preemptions(self, handle: str, limit: int) -> None:
        """The job's preemption limit (its ``max_preemptions`` option), kept for every watcher."""
        with self._connect() as db:
            db.execute("UPDATE jobs SET max_preemptions = ? WHERE handle = ?", (limit, handle))


__all__ = ["JOB_COLUMNS", "SCHEMA", "AttemptRecords", "bump", "note_state"]
