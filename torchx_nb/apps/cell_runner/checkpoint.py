"""Checkpoints that travel: the job's local checkpoint folder, restored at the start of every
attempt from the job's durable storage (``$TORCHX_NB_CHECKPOINT_URL``: ``file://``,
``s3://``, ``gs://``, or ``sagemaker:``) and saved back by generation (``generations``) on
SIGTERM, at the end and on ``torchx_nb.checkpoint().save()``.

The store's root also holds the ledger, ``attempts.json``: one entry per attempt (``n``,
``started``, ``ended``, ``why``: ``running``/``ok``/``exit N``/``sigterm``/``reclaimed``/
``lost``, ``ckpt_generation``, ``restored_at``: when the program wrote the checkpoint this
attempt restored, None when it restored none — how status tells "resumed from the checkpoint
of 10:01" and the work lost, the backend's ``native`` attempt and its ``job``), written by
rank 0. Rank 0 also leaves the store's URL in the job's output folder
(``.torchx-nb/checkpoint.json``), so a watcher finds the ledger wherever the backend keeps
it. It is how a job knows how many of its attempts were the program's own failures when the
backend's counter mixes them with preemptions: past ``$TORCHX_NB_MAX_RETRIES`` the attempt ends at once with
``RETRIES_SPENT_EXIT``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

from .common import rank as rank_of
from .generations import Generations, local_files
from .stores import Store, store_for

DIR_ENV = "TORCHX_NB_CHECKPOINT_DIR"  # the program's local folder (its rank's, once resolved)
URL_ENV = "TORCHX_NB_CHECKPOINT_URL"  # the store's root
ATTEMPT_ENV_ENV = "TORCHX_NB_ATTEMPT_ENV"  # the name of the backend's own attempt variable
MAX_RETRIES_ENV = "TORCHX_NB_MAX_RETRIES"
MAX_PREEMPTIONS_ENV = "TORCHX_NB_MAX_PREEMPTIONS"
GRACE_ENV = "TORCHX_NB_GRACE"  # seconds between SIGTERM and the kill
# what the runner tells the program (and its child processes) once the attempt has begun
BASE_ENV = "TORCHX_NB_CHECKPOINT_BASE"  # the folder the rank folders are made in
ATTEMPT_ENV = "TORCHX_NB_ATTEMPT"
PREEMPTIONS_ENV = "TORCHX_NB_PREEMPTIONS"
RESTORED_ENV = "TORCHX_NB_RESTORED_FROM"  # the restored generation's save time (epoch s)
# set by torchx_nb on a job it sends again past its backend's cap: the earlier native attempts
# the backend reclaimed, comma-separated — ``JOB/N`` (attempt N of native job JOB) or ``JOB``
# (that job's last attempt, which made it end and be sent again)
RECLAIMED_ENV = "TORCHX_NB_RECLAIMED"
# "1": the backend names in ``RECLAIMED_ENV`` every attempt it stopped (local_cwd's supervisor,
# whose preemption also runs again a replica that had already failed; local_docker's
# preemption): max_retries 0 says nothing then
RECLAIMS_NAMED_ENV = "TORCHX_NB_RECLAIMS_NAMED"
RETRIES_SPENT_EXIT = 171  # the program already failed more often than its max_retries
NOT_FAILURES = (170, 171)  # a trial's cancel, a spent attempt: not the program's failure
LEDGER = "attempts.json"
NATIVE_WAIT_S = 60.0  # how long a rank != 0 waits for rank 0 to add its attempt
POINTER = "checkpoint.json"  # in the output folder's .torchx-nb/: {"url": the store's root}


def read_ledger(store: Store) -> list[dict[str, Any]]:
    """The attempts so far, oldest first (none when there is no readable ledger)."""
    data = store.get_bytes(LEDGER)
    try:
        entries = json.loads(data) if data else []
    except ValueError:
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def failures(entries: list[dict[str, Any]]) -> int:
    """The program's failures: attempts that ended with an exit status of theirs, and those
    killed without a SIGTERM that no word of the backend calls a reclaim (``lost``: SIGKILL,
    the OOM killer; see ``Session.begin``)."""
    count = 0
    for e in entries:
        why = str(e.get("why", ""))
        count += why == "lost"
        code = why.removeprefix("exit ")
        if why.startswith("exit ") and code.lstrip("-").isdigit():
            count += int(code) != 0 and int(code) not in NOT_FAILURES
    return count


def preemptions(entries: list[dict[str, Any]]) -> int:
    """Attempts ended by SIGTERM (a preemption: a cancel ends the job, so no attempt follows
    one) or killed without one where the backend says it reclaimed them (``reclaimed``)."""
    return sum(e.get("why") in ("sigterm", "reclaimed") for e in entries)


def parse_reclaimed(value: str) -> list[str]:
    """``RECLAIMED_ENV``'s tokens in ``value``, in order, blanks left out."""
    return [t.strip() for t in value.split(",") if t.strip()]


def add_reclaimed(value: str, tokens: list[str]) -> str:
    """``RECLAIMED_ENV``'s ``value`` (what a job sent again was given) with ``tokens`` added:
    what the next native job is given, each token once, in order."""
    return ",".join(dict.fromkeys([*parse_reclaimed(value), *tokens]))


def _job_of(entry: dict[str, Any]) -> str:
    return str(entry.get("job") or str(entry.get("native") or "").rpartition("/")[0])


def _named(entry: dict[str, Any], tokens: set[str], last: bool) -> bool:
    """Whether ``RECLAIMED_ENV``'s ``tokens`` name the ledger ``entry`` (``last``: it is its
    native job's last entry). A multi-node job's node reads its job as ``JOB#NODE``, which the
    tokens name as ``JOB``. Where the backend named that job's reclaimed attempts one by one
    (``JOB/N``: Batch's), an entry with its attempt number is named by its own token only —
    the job's last entry may be an earlier attempt (the OOM killer's) when the reclaimed one
    was reclaimed before its runner began; else ``JOB`` names the job's last entry (GCP's
    uid: its last run was preempted)."""
    native = str(entry.get("native") or "")
    job = _job_of(entry)
    base = job.partition("#")[0]
    number = native.rpartition("/")[2] if "/" in native else ""
    if native in tokens or (number and f"{base}/{number}" in tokens):
        return True
    if number and any(t.startswith(f"{base}/") for t in tokens):
        return False
    return last and bool(job) and (job in tokens or base in tokens)


def mark_unended(entries: list[dict[str, Any]]) -> None:
    """Name how the earlier attempts in ``entries`` that never said how they ended (``running``:
    killed without a SIGTERM) ended: ``reclaimed`` (a preemption) when the backend runs this
    job again only after a reclaim (``max_retries`` 0: every backend's retries of the
    program's failures are off, so this attempt exists because its host was reclaimed or
    lost; not where the backend names each attempt it stopped: ``RECLAIMS_NAMED_ENV``), or
    when torchx_nb, sending the job again past its backend's cap, named it (``RECLAIMED_ENV``:
    Batch's record says which attempts lost their host; ``_named``); else ``lost`` — SIGKILL,
    the OOM killer or a host lost: a failure of the program's."""
    named_all = os.environ.get(RECLAIMS_NAMED_ENV) == "1"
    only_reclaims = _int_env(MAX_RETRIES_ENV) == 0 and not named_all
    tokens = set(parse_reclaimed(os.environ.get(RECLAIMED_ENV, "")))
    last = {_job_of(e): e for e in entries}  # each native job's last attempt
    for e in entries:
        if e.get("why") != "running":
            continue
        named = _named(e, tokens, last.get(_job_of(e)) is e)
        e["why"] = "reclaimed" if only_reclaims or named else "lost"


# the backend's id of a native job, the first of these set (the supervisor of local_cwd, which
# imports nothing of torchx_nb, keeps a copy: ``local_supervisor.supervisor.JOB_ID_VARS``)
JOB_ID_VARS = ("AWS_BATCH_JOB_ID", "SLURM_JOB_ID", "BATCH_JOB_UID")


def native_job(env: Mapping[str, str]) -> str:
    """The native job's id in the environment ``env`` ('' where the backend gives none): the
    ``JOB`` of the ledger's ``native`` attempts ``JOB/N`` and of ``RECLAIMED_ENV``'s tokens."""
    return next((env[v] for v in JOB_ID_VARS if env.get(v)), "")


def _int_env(name: str) -> int | None:
    value = os.environ.get(name, "").strip()
    return int(value) if value.isdigit() else None


def _default_base() -> str:
    return os.path.join(tempfile.gettempdir(), "torchx-nb-checkpoint")


class Session:
    """This attempt's checkpoint: the rank's folder, the store, the attempt's number and the
    ledger entry rank 0 keeps for it. One per process; ``save`` is thread-safe."""

    def __init__(self, folder: str, store: Store, rank: int) -> None:
        self.folder = folder
        self.store = store
        self.rank = rank
        self.generations = Generations(store, rank)
        self.lock = threading.Lock()
        self.attempt = 1
        self.preemptions = 0
        self.failures = 0
        self.restored_from: float | None = None
        # when the program wrote the restored checkpoint (None: none restored; unknown where
        # the platform restores it: SageMaker)
        self.restored_at: float | None = None
        self.generation: int | None = None
        self.entries: list[dict[str, Any]] = []
        self.native = ""
        self.job = ""  # the backend's id of this native job (Batch's, Slurm's, GCP's uid)
        self.terminated: float | None = None  # when a SIGTERM came (monotonic)

    @classmethod
    def from_env(cls) -> Session | None:
        """The session the job's environment asks for (None without a checkpoint URL)."""
        url = os.environ.get(URL_ENV, "")
        if not url:
            return None
        base = os.environ.get(BASE_ENV) or os.environ.get(DIR_ENV) or _default_base()
        rank = rank_of()
        return cls(os.path.join(base, f"rank-{rank}"), store_for(url, base), rank)

    def _native_attempt(self) -> str:
        """The backend's own name for this attempt (its job id and attempt variable)."""
        var = os.environ.get(ATTEMPT_ENV_ENV, "")
        self.job = native_job(os.environ)
        return f"{self.job}/{os.environ.get(var, '')}" if var and os.environ.get(var) else ""

    def begin(self) -> None:
        """Read the ledger (rank 0: add this attempt), restore the folder, and tell the
        program (``$TORCHX_NB_CHECKPOINT_DIR`` is now the rank's folder)."""
        self.entries = read_ledger(self.store)
        self.native = self._native_attempt()
        mine = [e for e in self.entries if self.native and e.get("native") == self.native]
        if self.native and not mine and self.rank != 0:  # rank 0 adds this attempt: wait for it
            deadline = time.monotonic() + NATIVE_WAIT_S
            while not mine and time.monotonic() < deadline:
                time.sleep(0.2)
                self.entries = read_ledger(self.store)
                mine = [e for e in self.entries if e.get("native") == self.native]
        if mine:
            self.attempt = int(mine[-1].get("n", len(self.entries)))
        elif self.rank == 0 or not self.entries or self.entries[-1].get("why") != "running":
            self.attempt = len(self.entries) + 1
        else:  # rank 0 has already added this attempt
            self.attempt = int(self.entries[-1].get("n", len(self.entries)))
        before = [e for e in self.entries if int(e.get("n", 0)) < self.attempt]
        if self.rank == 0:
            mark_unended(before)
        self.preemptions = preemptions(before)
        self.failures = failures(before)
        os.makedirs(self.folder, exist_ok=True)
        if not self.store.syncs_itself:
            manifest = self.generations.restore(self.folder)
            if manifest is not None:
                self.generation = int(manifest["generation"])
                self.restored_from = float(manifest.get("saved", 0.0)) or None
                self.restored_at = float(manifest.get("written") or manifest.get("saved") or 0)
        if self.rank == 0 and not mine:
            self.entries = [*before, self._entry("running")]
            self._write_ledger()
        self.export()

    def _entry(self, why: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"n": self.attempt, "started": time.time(), "ended": None}
        entry.update(why=why, ckpt_generation=self.generation)
        if not self.store.syncs_itself:
            entry["restored_at"] = self.restored_at
        if self.native:
            entry["native"] = self.native
        if self.job:
            entry["job"] = self.job
        return entry

    def export(self) -> None:
        """What ``torchx_nb.checkpoint()`` reads in this process and its children."""
        os.environ[BASE_ENV] = os.path.dirname(self.folder)
        os.environ[DIR_ENV] = self.folder
        os.environ[ATTEMPT_ENV] = str(self.attempt)
        os.environ[PREEMPTIONS_ENV] = str(self.preemptions)
        if self.restored_from is not None:
            os.environ[RESTORED_ENV] = repr(self.restored_from)

    def retries_spent(self) -> str | None:
        """One line when the program already failed more often than its max_retries."""
        limit = _int_env(MAX_RETRIES_ENV)
        if limit is None or self.failures <= limit:
            return None
        return (
            f"the program failed {self.failures} times (max_retries {limit}): not run again"
            f" (attempt {self.attempt}, {self.preemptions} preemptions)"
        )

    def save(self, timeout: float | None = None) -> int | None:
        """Save the folder as a new generation (nothing to do on SageMaker); None when
        another save holds the folder past ``timeout``."""
        if self.store.syncs_itself:
            return None
        if not self.lock.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            return None
        try:
            extra = {"attempt": self.attempt, "rank": self.rank}
            self.generation = self.generations.save(self.folder, extra)
            return self.generation
        finally:
            self.lock.release()

    def end(self, why: str) -> None:
        """Rank 0 records how this attempt ended (``ok``, ``exit N``, ``sigterm``)."""
        if self.rank != 0:
            return
        entries = read_ledger(self.store) or self.entries
        ours = [e for e in entries if e.get("n") == self.attempt]
        if not ours:
            entries.append(self._entry(why))
            ours = entries[-1:]
        ours[-1].update(why=why, ended=time.time(), ckpt_generation=self.generation)
        self.entries = entries
        self._write_ledger()

    def _write_ledger(self) -> None:
        self.store.put_bytes(LEDGER, json.dumps(self.entries, indent=1).encode())

    def idle(self) -> bool:
        """Whether the program never used its checkpoint: nothing restored, nothing saved,
        nothing in the folder (then nothing is saved and nothing said)."""
        return self.generation is None and not local_files(self.folder)

    def save_within(self, seconds: float) -> str:
        """Save in a thread given ``seconds`` at most (a SIGTERM's grace); what happened, in
        words for the log ('' when there was nothing to save)."""
        said: list[str] = []
        if self.idle():
            return ""

        def work() -> None:
            try:
                gen = self.save(timeout=seconds)
                if self.store.syncs_itself:
                    said.append("the checkpoint folder is SageMaker's to upload")
                elif gen is None:
                    said.append("checkpoint not saved: another save held it")
                else:
                    said.append(f"checkpoint saved (generation {gen})")
            except Exception as e:
                said.append(f"checkpoint not saved: {e}")

        worker = threading.Thread(target=work, name="torchx-nb-checkpoint", daemon=True)
        worker.start()
        worker.join(max(seconds, 0.0))
        return said[0] if said else f"checkpoint not saved within {seconds:g} s"


def grace() -> float:
    """Seconds a SIGTERM's save may take: the backend's grace less 2 s (30 s by default)."""
    try:
        value = float(os.environ.get(GRACE_ENV, "") or 30.0)
    except ValueError:
        value = 30.0
    return max(value - 2.0, 0.5)


def warn(text: str) -> None:
    sys.stderr.write(f"torchx_nb: {text}\n")
    sys.stderr.flush()


CURRENT: Session | None = None  # this process's session (``torchx_nb.checkpoint()`` reads it)


def begin_attempt() -> tuple[Session | None, int | None]:
    """The job runner's start: this attempt's session, restored and in the ledger (None
    without a checkpoint URL, or when the store cannot be read: the program then runs from
    its start, said in one line), and the exit status to end with at once when the program
    has already failed more often than its max_retries (``RETRIES_SPENT_EXIT``)."""
    global CURRENT
    try:
        session = Session.from_env()
        if session is None:
            return None, None
        session.begin()
    except Exception as e:
        warn(f"the checkpoint was not restored from {os.environ.get(URL_ENV)}: {e}")
        return None, None
    CURRENT = session
    spent = session.retries_spent()
    if spent is not None:
        warn(spent)
        return session, RETRIES_SPENT_EXIT
    if session.generation is not None:
        warn(
            f"attempt {session.attempt}: checkpoint generation {session.generation} restored"
            f" into {session.folder}"
        )
    return session, None


def on_sigterm(session: Session) -> None:
    """SIGTERM (a preemption, or a cancel: the backend's record tells them apart) saves the
    checkpoint within the grace, notes it in the ledger, then ends the process as SIGTERM
    would have (killed by the signal: the backend's record is untouched)."""
    import signal

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one save, however many arrive
        started = time.monotonic()
        with contextlib.suppress(Exception):
            session.end("sigterm")
        said = session.save_within(grace() - (time.monotonic() - started))
        with contextlib.suppress(Exception):
            session.end("sigterm")  # now with the generation saved
        # the handler may have come in the middle of a write to either stream (a reentrant
        # write raises): what is buffered goes out if it can, the line otherwise lost
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        with contextlib.suppress(Exception):
            if said:
                warn(f"SIGTERM: {said}")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def note_sigterm() -> None:
    """A runner that ends its own way on SIGTERM (the notebook runner stops its kernel and
    saves the notebook) says so: ``finish`` then saves within the grace and the ledger says
    ``sigterm``, not a failure."""
    if CURRENT is not None and CURRENT.terminated is None:
        CURRENT.terminated = time.monotonic()
        with contextlib.suppress(Exception):
            CURRENT.end("sigterm")


def finish(session: Session | None, code: int) -> None:
    """The runner's end, however the program ended: save the folder (within the grace after
    a SIGTERM), then the ledger says how (``ok``, ``exit N``, ``sigterm``). A failure here
    is one line: the result stands."""
    if session is None:
        return
    why = "ok" if code == 0 else f"exit {code}"
    if session.terminated is not None:
        why = "sigterm"
        said = session.save_within(grace() - (time.monotonic() - session.terminated))
        if said:
            warn(f"SIGTERM: {said}")
    elif code != RETRIES_SPENT_EXIT and not session.idle():  # a spent attempt ran nothing
        try:
            session.save()
        except Exception as e:
            warn(f"the checkpoint was not saved to {session.store.url}: {e}")
    with contextlib.suppress(Exception):
        session.end(why)


def begin_run(trial: str | None) -> None:
    """The runner's start (after a trial's cancel look): with a checkpoint URL, this
    attempt's session (a sweep trial's under ``trial-<i>/`` of the store and of the folder),
    restored, in the ledger and saving on SIGTERM; ends the process with
    ``RETRIES_SPENT_EXIT`` when the program's failures are already past its max_retries."""
    url = os.environ.get(URL_ENV, "")
    if not url:
        return
    if trial is not None and not os.environ.get(BASE_ENV):  # the runner's first look
        if url != "sagemaker:":
            os.environ[URL_ENV] = f"{url.rstrip('/')}/{trial}"
        base = os.environ.get(DIR_ENV) or ""
        os.environ[DIR_ENV] = os.path.join(base or _default_base(), trial)
    session, spent = begin_attempt()
    if spent is not None:
        raise SystemExit(spent)
    if session is not None:
        on_sigterm(session)
        if session.rank == 0 and not session.store.syncs_itself:
            leave_pointer(session.store.url)


def leave_pointer(url: str) -> None:
    """The store's URL in the job's output folder, where a watcher reading the job's outputs
    finds it (``POINTER``); a failure costs only status's checkpoint times."""
    out = os.path.join(os.environ.get("TORCHX_OUTPUT_DIR") or "torchx-outputs", ".torchx-nb")
    with contextlib.suppress(OSError):
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, POINTER), "w") as f:
            json.dump({"url": url}, f)
