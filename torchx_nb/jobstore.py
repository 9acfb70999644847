"""The job store: a SQLite record of every submission, so jobs outlive the kernel that ran them.

``%torchx list``, the REST API and the side panel read it. Several processes (kernels, the
Jupyter server, the CLI) write it at once: WAL mode and a busy timeout make that safe."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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


class JobStore:
    """Thin wrapper over one SQLite file; each call opens a short-lived connection."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout = 30000")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")
            yield db
        finally:
            db.close()

    def add(self, record: JobRecord) -> None:
        """Insert (or replace) a submission."""
        row = asdict(record)
        cols = ", ".join(row)
        marks = ", ".join(f":{k}" for k in row)
        with self._connect() as db:
            db.execute(f"INSERT OR REPLACE INTO jobs ({cols}) VALUES ({marks})", row)

    def update_state(self, handle: str, state: str, msg: str | None = None) -> None:
        """Record the latest state seen; the end time is set once, when it turns terminal."""
        now = time.time()
        with self._connect() as db:
            db.execute(
                "UPDATE jobs SET state = ?, updated = ?, msg = COALESCE(?, msg),"
                " ended = CASE WHEN ended IS NULL AND ? IN ('SUCCEEDED','FAILED','CANCELLED')"
                " THEN ? ELSE ended END WHERE handle = ?",
                (state, now, msg, state, now, handle),
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
