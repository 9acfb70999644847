"""The job store: a SQLite record of every submission, so jobs outlive the kernel that ran them.

``%torchx list``, the REST API and the side panel read it. Several processes (kernels, the
Jupyter server, the CLI) write it at once: WAL mode and a busy timeout make that safe.

Watchers follow what changed by a counter the store assigns (``rev``, bumped by triggers on
every insert and state write, whoever writes), never by wall-clock times: machines and
processes disagree about the time. Text search folds case with Python's ``str.lower`` into a
stored column, so a query matches the same rows whatever its alphabet (SQLite's ``lower()``
folds ASCII only), and the server's event stream uses the same fold (``torchx_nb/search.py``)."""

from __future__ import annotations

import atexit
import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib import parse as urllib_parse

from torchx_nb import attempt_store
from torchx_nb.attempt_store import AttemptRecords
from torchx_nb.paths import JOBSTORE_ENV, check_private, jobstore_path, private_dir
from torchx_nb.search import fold_query, search_text
from torchx_nb.specs.exceptions import JobStoreError

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
    params TEXT,
    rev INTEGER,
    search TEXT,
    notified REAL,
    started REAL,
    build_seconds REAL,
    endings TEXT,
    attempt INTEGER NOT NULL DEFAULT 1,
    preemptions INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    max_preemptions INTEGER
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS notices (
    handle TEXT PRIMARY KEY,
    id TEXT NOT NULL,
    owed REAL NOT NULL,
    lease REAL,
    owner TEXT,
    sent REAL,
    tries INTEGER NOT NULL DEFAULT 0,
    error TEXT
);
INSERT OR IGNORE INTO meta (key, value) VALUES ('rev', 0);
INSERT OR IGNORE INTO meta (key, value) VALUES ('id', abs(random()) % 1000000000000);
CREATE INDEX IF NOT EXISTS jobs_submitted ON jobs (submitted);
CREATE INDEX IF NOT EXISTS jobs_scheduler ON jobs (scheduler, submitted);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, submitted);
CREATE INDEX IF NOT EXISTS jobs_updated ON jobs (updated);
"""
# created after the added columns exist (a store of an earlier version gets them first)
_INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_sweep ON jobs (sweep, trial);
CREATE INDEX IF NOT EXISTS jobs_rev ON jobs (rev);
CREATE INDEX IF NOT EXISTS jobs_keyset ON jobs (submitted, handle);
CREATE TRIGGER IF NOT EXISTS jobs_rev_insert AFTER INSERT ON jobs BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'rev';
    UPDATE jobs SET rev = (SELECT value FROM meta WHERE key = 'rev') WHERE rowid = NEW.rowid;
END;
CREATE TRIGGER IF NOT EXISTS jobs_rev_update AFTER UPDATE OF state, msg, ended, outputs ON jobs
BEGIN
    UPDATE meta SET value = value + 1 WHERE key = 'rev';
    UPDATE jobs SET rev = (SELECT value FROM meta WHERE key = 'rev') WHERE rowid = NEW.rowid;
END;
"""
_ADDED_COLUMNS = {
    "outputs": "TEXT",
    "sweep": "TEXT",
    "trial": "INTEGER",
    "params": "TEXT",
    "rev": "INTEGER",
    "search": "TEXT",
    "notified": "REAL",
    "started": "REAL",
    "build_seconds": "REAL",
    "endings": "TEXT",
    **attempt_store.JOB_COLUMNS,
}
_ACTIVE = "state NOT IN ('SUCCEEDED','FAILED','CANCELLED')"
# jobs worth watching: not ended, and still known to their scheduler (a positive list, so the
# state index serves the query)
_WATCHED = "state IN ('UNSUBMITTED','SUBMITTED','PENDING','RUNNING')"
# (aliases: inside JobStore, ``list`` names the method)
Strings = list[str]
Values = list[Any]

_TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# connections a forked child inherited: never used there, and kept from being closed while it
# runs (SQLite: a connection does not cross a fork)
_INHERITED: list[threading.local] = []
# the stores of this process, whose connections are closed at its exit (``_close_at_exit``)
_STORES: weakref.WeakSet[JobStore] = weakref.WeakSet()


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
    rev: int | None = None  # the store's change counter at this record's last write
    started: float | None = None  # when it started running (the scheduler's time, or first seen)
    build_seconds: float | None = None  # how long its image took to build and push
    # how each replica ended, as JSON (``runner.endings``), kept from the last status
    # its scheduler gave: the truth once the scheduler keeps nothing of the job
    endings: str | None = None
    attempt: int = 1  # the current attempt (``attempts``: each one, how it ended)
    preemptions: int = 0  # how often it was preempted
    failures: int = 0  # how often its program failed
    max_preemptions: int | None = None  # its preemption limit (None: the default)

    @property
    def is_terminal(self) -> bool:
        return self.state in _TERMINAL


default_path = jobstore_path


Records = list[JobRecord]
_FIELDS = tuple(JobRecord.__dataclass_fields__)


def _record(row: sqlite3.Row) -> JobRecord:
    return JobRecord(**{k: row[k] for k in _FIELDS})


@dataclass(frozen=True)
class Changes:
    """What changed in the store after a counter value: the store's identity (a store made
    anew restarts its counter), its counter now, and the changed records, oldest first."""

    store_id: int
    rev: int
    records: list[JobRecord]


class JobStore(AttemptRecords):
    """Thin wrapper over one SQLite file; each call opens a connection to it and closes it,
    or with ``keep`` (a ``torchx-nb`` command, a short-lived process) each thread keeps one
    open until the process ends. A long-lived process (a kernel, the Jupyter server) keeps
    none: a connection left open keeps the store's write-ahead log, with what was written,
    beside the file while it runs, so a ``cp`` of the file would miss the latest jobs and a
    backup copied back over it would be replayed over by that log.

    The file and its folder are private to the user (0600 in a 0700 folder): the store names
    every job, notebook and image. A corrupt or unreadable store raises ``JobStoreError`` with
    one line that names the file and what to do."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, timeout: float = 30.0, keep: bool = False
    ) -> None:
        self.path = Path(path) if path else default_path()
        self.timeout = timeout
        self.keep = keep
        self._explicit = bool(path or os.environ.get(JOBSTORE_ENV))
        self._absolute = self.path.absolute()
        self._uri = "file:" + urllib_parse.quote(str(self._absolute)) + "?mode=rw"
        self._local = threading.local()  # this thread's connection (``_connection``)
        self._pid = os.getpid()
        _STORES.add(self)
        self._make()

    def _make(self) -> None:
        """Create the file (0600, in a private folder) if it is missing, and bring its schema
        up to date: at open, and again when the file vanished while we ran (moved aside,
        deleted), so nobody ever gets a world-readable empty file that SQLite made."""
        if self._explicit:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        else:
            private_dir(self.path.parent)
        if not self.path.exists():
            with contextlib.suppress(FileExistsError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                for suffix in ("-wal", "-shm"):  # left by the file that went: never replay them
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(f"{self.path}{suffix}")
        check_private(self.path)
        with self._connect(make=False) as db:
            db.executescript(_SCHEMA + attempt_store.SCHEMA)
            columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in columns:  # a store made by an earlier version
                    try:
                        db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
                    except sqlite3.OperationalError as e:
                        # another process opening the store added it since we looked (the
                        # first commands, kernels and server after an upgrade, all at once)
                        if "duplicate column name" not in str(e):
                            raise
            db.executescript(_INDEXES)
            if "search" not in columns:
                db.create_function("tnb_search", 4, search_text, deterministic=True)
                db.execute(
                    "UPDATE jobs SET search = tnb_search(handle, name, notebook, sweep)"
                    " WHERE search IS NULL"
                )

    @contextmanager
    def _connect(self, make: bool = True) -> Iterator[sqlite3.Connection]:
        """This thread's connection to the store (``_connection``), its errors as one line
        each; one that failed is closed, and the next call opens another."""
        db = self._connection(make)
        db.row_factory = None  # a caller may have set sqlite3.Row on it
        try:
            with self._errors():
                try:
                    yield db
                finally:
                    if db.in_transaction:  # never left holding a lock or an old snapshot
                        db.execute("ROLLBACK")
        except JobStoreError:
            self._drop(db)
            raise
        finally:
            if not self.keep:  # a long-lived process: nothing left open between calls
                self._drop(db)

    def _connection(self, make: bool) -> sqlite3.Connection:
        """The connection this thread keeps open to the store, opened on first use: opening
        one (three pragmas) and closing it (SQLite checkpoints its WAL then, with an fsync)
        cost a short command most of its store time when every call did both. A new one is
        opened in a forked child (a connection never crosses a fork) and when the file at
        ``path`` is not the one it has open (moved aside, deleted, replaced): it never
        creates the file (``mode=rw``), so a store whose file disappeared, or one left without
        our tables, is made again properly first."""
        if self._pid != os.getpid():  # forked: the parent's connections are its own
            _INHERITED.append(self._local)
            self._local, self._pid = threading.local(), os.getpid()
        local = self._local
        db: sqlite3.Connection | None = getattr(local, "db", None)
        if db is not None:
            if _identity(self._absolute) == local.identity:
                return db
            self._drop(db)  # SQLite neither checkpoints nor deletes a moved file's WAL
        try:
            db = self._open()
        except sqlite3.OperationalError as e:
            if make and not self.path.exists():
                self._make()  # leaves this thread's connection to the new file open
                return self._connection(make=False)
            raise self._error(e) from e
        except sqlite3.Error as e:
            raise self._error(e) from e
        try:
            with self._errors():
                if make and not _has_tables(db):
                    db.close()
                    self._make()
                    return self._connection(make=False)
                db.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            db.close()
            raise
        local.db, local.identity = db, _identity(self._absolute)
        return db

    def close(self) -> None:
        """Close this thread's connection: SQLite then writes the WAL into the file and, the
        last connection to it gone, removes the WAL, so the file alone is the whole store
        again (a user's ``cp jobs.sqlite backup``, or a backup copied back over it, with no
        WAL of the store as it was left beside it to be replayed over the backup)."""
        db = getattr(self._local, "db", None) if self._pid == os.getpid() else None
        if db is not None:
            self._drop(db)

    def _drop(self, db: sqlite3.Connection) -> None:
        """Close ``db`` and forget it, if it is this thread's connection."""
        if getattr(self._local, "db", None) is db:
            self._local.db = None
        with contextlib.suppress(sqlite3.Error):
            db.close()

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """SQLite's errors as ``JobStoreError``: one line naming the file and the fix."""
        try:
            yield
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

    def _open(self) -> sqlite3.Connection:
        return sqlite3.connect(self._uri, timeout=self.timeout, isolation_level=None, uri=True)

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
        row.pop("rev")
        row["search"] = search_text(record.handle, record.name, record.notebook, record.sweep)
        cols = ", ".join(row)
        marks = ", ".join(f":{k}" for k in row)
        with self._connect() as db:
            db.execute(f"INSERT OR REPLACE INTO jobs ({cols}) VALUES ({marks})", row)
            db.execute("DELETE FROM attempts WHERE handle = ?", (record.handle,))
            db.execute(attempt_store.FIRST, (record.handle,))

    def update_state(
        self,
        handle: str,
        state: str,
        msg: str | None = None,
        ended: float | None = None,
        started: float | None = None,
        endings: str | None = None,
    ) -> None:
        """Record the latest state seen (``endings``: how each replica of an ended job ended,
        kept the first time it is given); the end time (``ended``, else now) is set once, when it
        turns terminal. Only a real change is written (so ``updated`` says when something
        changed), and a job that has ended keeps its final state: a late write from a slower
        poller never moves it back to RUNNING."""
        now = time.time()
        with self._connect() as db:
            if endings is not None:  # once: what its scheduler said when it had ended
                db.execute(
                    "UPDATE jobs SET endings = ? WHERE handle = ? AND endings IS NULL",
                    (endings, handle),
                )
            cur = db.execute(
                "UPDATE jobs SET state = ?, updated = ?, msg = COALESCE(?, msg),"
                " started = COALESCE(started, ?),"
                " ended = CASE WHEN ended IS NULL AND ? IN ('SUCCEEDED','FAILED','CANCELLED')"
                " THEN ? ELSE ended END"
                f" WHERE handle = ? AND {_ACTIVE} AND (state != ? OR msg != COALESCE(?, msg))",
                (state, now, msg, started, state, ended or now, handle, state, msg),
            )
            if cur.rowcount:  # the attempt's start or end, as the job's
                attempt_store.note_state(db, handle, state, started, ended)

    def get(self, handle: str) -> JobRecord | None:
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT * FROM jobs WHERE handle = ?", (handle,)).fetchone()
        return _record(row) if row else None

    def trials(self, sweep: str) -> list[JobRecord]:
        """The trials of one sweep, in grid order."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            rows = db.execute(
                "SELECT * FROM jobs WHERE sweep = ? ORDER BY trial", (sweep,)
            ).fetchall()
        return [_record(r) for r in rows]

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
        return [_record(r) for r in rows]

    def page(
        self,
        scheduler: str | None = None,
        state: str | None = None,
        notebooks: Strings | None = None,
        text: str | None = None,
        offset: int = 0,
        limit: int = 50,
        after: tuple[float, str] | None = None,
    ) -> tuple[Records, int]:
        """One page of matching submissions, newest first (ties by handle), and how many match
        in all: an indexed, bounded query, whatever the size of the store. ``text`` is a
        case-insensitive substring of the handle, name, notebook or sweep. ``after`` is the
        (submitted, handle) of the last row already shown: the page continues from there, so
        jobs submitted meanwhile never repeat or push a row out (keyset paging)."""
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
            # a row written without our fold (raw SQL, an older torchx_nb) falls back to
            # SQLite's ASCII one rather than vanishing from every search
            where.append(
                "instr(coalesce(search, lower(handle || ' ' || name || ' '"
                " || coalesce(notebook, '') || ' ' || coalesce(sweep, ''))), ?) > 0"
            )
            args.append(fold_query(text))
        cond = (" WHERE " + " AND ".join(where)) if where else ""
        page_where = list(where)
        page_args = list(args)
        if after is not None:
            page_where.append("(submitted, handle) < (?, ?)")
            page_args.extend(after)
            offset = 0
        page_cond = (" WHERE " + " AND ".join(page_where)) if page_where else ""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            total = db.execute(f"SELECT COUNT(*) FROM jobs{cond}", args).fetchone()[0]
            rows = db.execute(
                f"SELECT * FROM jobs{page_cond} ORDER BY submitted DESC, handle DESC"
                " LIMIT ? OFFSET ?",
                [*page_args, limit, offset],
            ).fetchall()
        return [_record(r) for r in rows], int(total)

    def counts(self) -> dict[str, int]:
        """How many submissions are in each state."""
        with self._connect() as db:
            return {s: n for s, n in db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state")}

    def changes(self, after: int, limit: int = 1000) -> Changes:
        """Submissions written (added, or their state, message or outputs changed) after the
        store's counter was ``after``, oldest change first, at most ``limit``."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            rows = db.execute(
                "SELECT * FROM jobs WHERE rev > ? ORDER BY rev LIMIT ?", (after, limit)
            ).fetchall()
        return Changes(int(meta["id"]), int(meta["rev"]), [_record(r) for r in rows])

    def owe_notice(self, handle: str, notice_id: str) -> bool:
        """Record the job-end notice of an ended job as owed (the outbox; once per job: the
        first caller's ``notice_id`` stays). True while it is owed (not yet acknowledged)."""
        with self._connect() as db:
            db.execute(
                "INSERT OR IGNORE INTO notices (handle, id, owed) SELECT handle, ?, ? FROM jobs"
                " WHERE handle = ? AND state IN ('SUCCEEDED','FAILED','CANCELLED')"
                " AND notified IS NULL",  # sent by a version before the outbox: not again
                (notice_id, time.time(), handle),
            )
            row = db.execute("SELECT sent FROM notices WHERE handle = ?", (handle,)).fetchone()
        return row is not None and row[0] is None

    def lease_notice(self, handle: str, owner: str, seconds: float) -> bool:
        """Take an owed notice to send it, for ``seconds`` (one atomic update: one sender at a
        time across processes; a crashed sender's lease runs out and another takes it)."""
        now = time.time()
        with self._connect() as db:
            cur = db.execute(
                "UPDATE notices SET lease = ?, owner = ? WHERE handle = ? AND sent IS NULL"
                " AND (lease IS NULL OR lease < ?)",
                (now + seconds, owner, handle, now),
            )
            return cur.rowcount == 1

    def renew_notice(self, handle: str, owner: str, seconds: float) -> bool:
        """Extend ``owner``'s lease on a notice it is still sending (the heartbeat of a slow
        delivery); False once the lease is no longer its own (it ran out and another took it)
        or the notice was acknowledged."""
        with self._connect() as db:
            cur = db.execute(
                "UPDATE notices SET lease = ? WHERE handle = ? AND owner = ? AND sent IS NULL"
                " AND lease IS NOT NULL",
                (time.time() + seconds, handle, owner),
            )
            return cur.rowcount == 1

    def notice_sent(self, handle: str) -> None:
        """The webhook acknowledged the notice: no other delivery is made."""
        now = time.time()
        with self._connect() as db:
            db.execute(
                "UPDATE notices SET sent = ?, lease = NULL, tries = tries + 1, error = NULL"
                " WHERE handle = ?",
                (now, handle),
            )
            db.execute("UPDATE jobs SET notified = ? WHERE handle = ?", (now, handle))

    def notice_unsent(self, handle: str, owner: str, error: str | None, tries: int = 0) -> None:
        """Give back a leased notice still owed (``error``: why the last try failed)."""
        with self._connect() as db:
            db.execute(
                "UPDATE notices SET lease = NULL, tries = tries + ?, error = COALESCE(?, error)"
                " WHERE handle = ? AND owner = ? AND sent IS NULL",
                (tries, error, handle, owner),
            )

    def notice(self, handle: str) -> dict[str, Any] | None:
        """The notice's record in the outbox: id, owed, lease, owner, sent, tries, error."""
        with self._connect() as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT * FROM notices WHERE handle = ?", (handle,)).fetchone()
        return dict(row) if row else None

    def owed_notices(self, limit: int = 100) -> Strings:
        """Handles whose notice is owed and free to take (not leased), oldest first."""
        with self._connect() as db:
            rows = db.execute(
                "SELECT handle FROM notices WHERE sent IS NULL AND (lease IS NULL OR lease < ?)"
                " ORDER BY owed LIMIT ?",
                (time.time(), limit),
            ).fetchall()
        return [r[0] for r in rows]

    def delete(self, handle: str) -> None:
        with self._connect() as db:
            db.execute("DELETE FROM jobs WHERE handle = ?", (handle,))
            db.execute("DELETE FROM attempts WHERE handle = ?", (handle,))


@atexit.register
def _close_at_exit() -> None:
    """A process ending (``torchx-nb`` too, which skips the interpreter's teardown) closes
    its stores' connections of the thread that exits (``JobStore.close``)."""
    for store in list(_STORES):
        with contextlib.suppress(Exception):
            store.close()


def _identity(path: Path) -> tuple[int, int] | None:
    """Which file ``path`` names (device, inode); None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _has_tables(db: sqlite3.Connection) -> bool:
    return (
        db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone()
        is not None
    )
