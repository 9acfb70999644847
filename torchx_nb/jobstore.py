"""The job store: a SQLite record of every submission, so jobs outlive the kernel that ran them.

``%torchx list``, the REST API and the side panel read it. Several processes (kernels, the
Jupyter server, the CLI) write it at once: WAL mode and a busy timeout make that safe."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from torchx_nb.paths import JOBSTORE_ENV, check_private, jobstore_path, private_dir
from torchx_nb.specs.api import TorchxNbError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    handle TEXT PRIMARY KEY,
    scheduler TEXT NOT NULL,
    session TEXT NOT NULL,
    app_id TEXT NOT NULL,
    name TEXT NOT NULL,
    image TEXT NOT NULL DEFAULT '',
    cell_hash TEXT,
    notebook TEXT,
    workspace TEXT,
    submitted REAL NOT NULL,
    state TEXT NOT NULL,
    updated REAL NOT NULL,
    ended REAL,
    msg TEXT NOT NULL DEFAULT '',
    outputs TEXT,
    sweep TEXT,
    trial INTEGER,
    params TEXT
);
CREATE INDEX IF NOT EXISTS jobs_submitted ON jobs (submitted);
CREATE INDEX IF NOT EXISTS jobs_scheduler ON jobs (scheduler, submitted);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, submitted);
CREATE INDEX IF NOT EXISTS jobs_updated ON jobs (updated);
"""
# created after the added columns exist (a store of an earlier version gets them first)
_INDEXES = "CREATE INDEX IF NOT EXISTS jobs_sweep ON jobs (sweep, trial);"
_ADDED_COLUMNS = {"outputs": "TEXT", "sweep": "TEXT", "trial": "INTEGER", "params": "TEXT"}
_ACTIVE = "state NOT IN ('SUCCEEDED','FAILED','CANCELLED')"
# jobs worth watching: not ended, and still known to their scheduler (a positive list, so the
# state index serves the query)
_WATCHED = "state IN ('UNSUBMITTED','SUBMITTED','PENDING','RUNNING')"
# (aliases: inside JobStore, ``list`` names the method)
Strings = list[str]
Values = list[Any]

_TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


@dataclass
class JobRecord:
    """One submission: where it went, what it was, and the last state we saw."""

    handle: str
    scheduler: str
    session: str
    app_id: str
    name: str
    image: str
    submitted: float
    state: str
    updated: float
    cell_hash: str | None = None
    notebook: str | None = None
    workspace: str | None = None
    ended: float | None = None
    msg: str = ""
    outputs: str | None = None
    sweep: str | None = None  # the sweep this job is a trial of
    trial: int | None = None  # its index in the sweep's grid
    params: str | None = None  # its point of the grid, as JSON

    @property
    def is_terminal(self) -> bool:
        return self.state in _TERMINAL


default_path = jobstore_path


Records = list[JobRecord]


class JobStoreError(TorchxNbError):
    """The job store cannot be read or written; the message names the file and the fix."""


class JobStore:
    """Thin wrapper over one SQLite file; each call opens a short-lived connection.

    The file and its folder are private to the user (0600 in a 0700 folder): the store names
    every job, notebook and image. A corrupt or unreadable store raises ``JobStoreError`` with
    one line that names the file and what to do."""

    def __init__(self, path: str | os.PathLike[str] | None = None, timeout: float = 30.0) -> None:
        self.path = Path(path) if path else default_path()
        self.timeout = timeout
        if path or os.environ.get(JOBSTORE_ENV):
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            private_dir(self.path.parent)
        if not self.path.exists():
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        check_private(self.path)
        with self._connect() as db:
            db.executescript(_SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in columns:  # a store made by an earlier version
                    db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
            db.executescript(_INDEXES)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as e:
            raise self._error(e) from e
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            yield db
        except sqlite3.OperationalError as e:
            if "locked" in str(e) or "busy" in str(e):
                raise JobStoreError(
                    f"the job store {self.path} stayed locked for {self.timeout:g} s ({e});"
                    " another process"
                    " holds it: close it, or set TORCHX_NB_JOBSTORE to another file"
                ) from e
            raise self._error(e) from e
        except sqlite3.DatabaseError as e:
            raise self._error(e) from e
        finally:
            db.close()

    def _error(self, e: Exception) -> JobStoreError:
        if not os.access(self.path, os.R_OK) and self.path.exists():
            fix = f"give yourself access (chmod 600 {self.path})"
        else:
            fix = (
                f"move it aside (mv {self.path} {self.path}.bad) and a new one is made,"
                " or set TORCHX_NB_JOBSTORE to another file"
            )
        return JobStoreError(f"cannot use the job store {self.path}: {e}; {fix}")

    def add(self, record: JobRecord) -> None:
        """Insert (or replace) a submission."""
        row = asdict(record)
        cols = ", ".join(row)
        marks = ", ".join(f":{k}" for k in row)
        with self._connect() as db:
            db.execute(f"INSERT OR REPLACE INTO jobs ({cols}) VALUES ({marks})", row)

    def update_state(
        self, handle: str, state: str, msg: str | None = None, ended: float | None = None
    ) -> None:
        """Record the latest state seen; the end time (``ended``, else now) is set once, when it
        turns terminal. Only a real change is written (so ``updated`` says when something
        changed), and a job that has ended keeps its final state: a late write from a slower
        poller never moves it back to RUNNING."""
        now = time.time()
        with self._connect() as db:
            db.execute(
                "UPDATE jobs SET state = ?, updated = ?, msg = COALESCE(?, msg),"
                " ended = CASE WHEN ended IS NULL AND ? IN ('SUCCEEDED','FAILED','CANCELLED')"
                " THEN ? ELSE ended END"
                f" WHERE handle = ? AND {_ACTIVE} AND (state != ? OR msg != COALESCE(?, msg))",
                (state, now, msg, state, ended or now, handle, state, msg),
            )

    def get(self, handle: str) -> JobRecord | None:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT * FROM jobs WHERE handle = ?", (handle,)).fetchone()
        return JobRecord(**dict(row)) if row else None

    def trials(self, sweep: str) -> list[JobRecord]:
        """The trials of one sweep, in grid order."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT * FROM jobs WHERE sweep = ? ORDER BY trial", (sweep,)
            ).fetchall()
        return [JobRecord(**dict(r)) for r in rows]

    def list(
        self,
        scheduler: str | None = None,
        limit: int | None = None,
        active_only: bool = False,
    ) -> list[JobRecord]:
        """Submissions, newest first; ``active_only``: those still worth watching (not ended
        and not UNKNOWN)."""
        sql = "SELECT * FROM jobs"
        where: list[str] = []
        args: list[Any] = []
        if scheduler:
            where.append("scheduler = ?")
            args.append(scheduler)
        if active_only:
            where.append(_WATCHED)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY submitted DESC"
        if limit:
            sql += " LIMIT ?"
            args.append(limit)
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(sql, args).fetchall()
        return [JobRecord(**dict(r)) for r in rows]

    def page(
        self,
        scheduler: str | None = None,
        state: str | None = None,
        notebooks: Strings | None = None,
        text: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[Records, int]:
        """One page of matching submissions, newest first, and how many match in all: an
        indexed, bounded query, whatever the size of the store. ``text`` is a case-insensitive
        substring of the handle, name, notebook or sweep."""
        where: Strings = []
        args: Values = []
        if scheduler:
            where.append("scheduler = ?")
            args.append(scheduler)
        if state:
            where.append("state = ?")
            args.append(state)
        if notebooks:
            where.append(f"notebook IN ({', '.join('?' * len(notebooks))})")
            args.extend(notebooks)
        if text:
            where.append(
                "instr(lower(handle || ' ' || name || ' ' || coalesce(notebook, '') || ' '"
                " || coalesce(sweep, '')), ?) > 0"
            )
            args.append(text.lower())
        cond = (" WHERE " + " AND ".join(where)) if where else ""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            total = db.execute(f"SELECT COUNT(*) FROM jobs{cond}", args).fetchone()[0]
            rows = db.execute(
                f"SELECT * FROM jobs{cond} ORDER BY submitted DESC LIMIT ? OFFSET ?",
                [*args, limit, offset],
            ).fetchall()
        return [JobRecord(**dict(r)) for r in rows], int(total)

    def counts(self) -> dict[str, int]:
        """How many submissions are in each state."""
        with self._connect() as db:
            return {s: n for s, n in db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")}

    def changed_since(self, updated: float, limit: int = 1000) -> Records:
        """Submissions written (added or updated) at or after ``updated``, oldest change
        first, at most ``limit``."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT * FROM jobs WHERE updated >= ? ORDER BY updated LIMIT ?", (updated, limit)
            ).fetchall()
        return [JobRecord(**dict(r)) for r in rows]

    def delete(self, handle: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM jobs WHERE handle = ?", (handle,))
