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

from torchx_nb.paths import private_dir
from torchx_nb.specs.api import TorchxNbError

JOBSTORE_ENV = "TORCHX_NB_JOBSTORE"

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
    msg TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS jobs_submitted ON jobs (submitted);
CREATE INDEX IF NOT EXISTS jobs_scheduler ON jobs (scheduler);
"""

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

    @property
    def is_terminal(self) -> bool:
        return self.state in _TERMINAL


def default_path() -> Path:
    """``$TORCHX_NB_JOBSTORE``, else ``jobs.sqlite`` in the torchx_nb data dir."""
    explicit = os.environ.get(JOBSTORE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    from torchx_nb.paths import data_dir

    return data_dir() / "jobs.sqlite"


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
        private_dir(self.path.parent)
        if not self.path.exists():
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        with self._connect() as db:
            db.executescript(_SCHEMA)

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
        turns terminal. A job that has ended keeps its final state: a late write from a slower
        poller never moves it back to RUNNING."""
        now = time.time()
        with self._connect() as db:
            db.execute(
                "UPDATE jobs SET state = ?, updated = ?, msg = COALESCE(?, msg),"
                " ended = CASE WHEN ended IS NULL AND ? IN ('SUCCEEDED','FAILED','CANCELLED')"
                " THEN ? ELSE ended END"
                " WHERE handle = ? AND state NOT IN ('SUCCEEDED','FAILED','CANCELLED')",
                (state, now, msg, state, ended or now, handle),
            )

    def get(self, handle: str) -> JobRecord | None:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT * FROM jobs WHERE handle = ?", (handle,)).fetchone()
        return JobRecord(**dict(row)) if row else None

    def list(
        self,
        scheduler: str | None = None,
        limit: int | None = None,
        active_only: bool = False,
    ) -> list[JobRecord]:
        """Submissions, newest first."""
        sql = "SELECT * FROM jobs"
        where: list[str] = []
        args: list[Any] = []
        if scheduler:
            where.append("scheduler = ?")
            args.append(scheduler)
        if active_only:
            where.append("state NOT IN ('SUCCEEDED','FAILED','CANCELLED')")
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

    def delete(self, handle: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM jobs WHERE handle = ?", (handle,))
