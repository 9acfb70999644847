"""A private Slurm cluster on 127.0.0.1 for the tests: MariaDB and slurmdbd (so ``sacct`` works),
one slurmctld and two slurmd nodes, all from Debian's packages, with their own config, ports,
state and logs under a temporary folder, so two test runs on one machine do not meet.

Where it differs from a real cluster: both nodes are this machine (two ``slurmd -N`` on one host),
their names are loopback addresses (``127.0.0.1``, ``127.0.0.2``) so the rank-0 host a job reads
from ``SLURM_JOB_NODELIST_HET_GROUP_0`` resolves without /etc/hosts, authentication is
``auth/none`` (no munge), and jobs run as the test's user (root here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.infra.dockerd import _stop, _wait, free_port

NODES = ("127.0.0.1", "127.0.0.2")
PACKAGES = ("slurmctld", "slurmd", "sbatch", "slurmdbd", "mariadbd", "mariadb-install-db")

# A preempting cluster, as sites run spot-like partitions: a job of ``urgent`` (higher
# PriorityTier) takes the nodes of a running ``spot`` job (requeued after GraceTime: SIGTERM,
# then the job is killed and put back in the queue) or ``spotc`` job (cancelled: it ends
# PREEMPTED). ``spot`` is the default partition. PreemptExemptTime=0: any running job may be
# preempted at once.
PREEMPT_CONF = [
    "PreemptType=preempt/partition_prio",
    "PreemptMode=REQUEUE",
    "PreemptExemptTime=00:00:00",
    "PartitionName=spot Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1"
    " PreemptMode=REQUEUE GraceTime=5",
    "PartitionName=spotc Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1"
    " PreemptMode=CANCEL GraceTime=5",
    "PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF",
]


def slurm_available() -> str | None:
    """None when the daemons are installed and we may run them, else why not."""
    for exe in PACKAGES:
        if shutil.which(exe) is None and not Path(f"/usr/sbin/{exe}").exists():
            return f"{exe} is not installed: run scripts/infra/install-debian-packages.sh"
    if os.geteuid() != 0:
        return "slurmd needs root here"
    return None


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    root: Path
    accounting: bool = True
    # CPUs per node; more than the machine has (benchmarks: many running jobs) is allowed
    cpus: int = 2
    # a preempting cluster (PREEMPT_PARTITIONS): its own instance, so a preemptor never meets
    # another test's jobs
    preempt: bool = False
    conf: Path = field(init=False)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The ClusterName (sacct's rows are kept per cluster)."""
        return f"c{os.getpid() % 100000}{'p' if self.preempt else ''}"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        out = open(self.root / log, "ab")  # noqa: SIM115 - the daemon owns it
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        out.close()
        self.procs.append(proc)
        return proc

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=60, check=check
        )

    def start(self) -> SlurmCluster:
        r = self.root
        for d in ("state", "spool", "db", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        self.conf = r / "slurm.conf"
        ctld, dbd, db = free_port(), free_port(), free_port()
        lines = [
            f"ClusterName={self.name}",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={ctld}",
            "AuthType=auth/none",
            "CredType=cred/none",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/slurmctld.pid",
            f"SlurmdPidFile={r}/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "MpiDefault=none",
            "ReturnToService=2",
            "MinJobAge=30",
            "SchedulerParameters=bf_interval=1,sched_interval=1",
            "DefMemPerCPU=100",
            "KillWait=5",
            "JobRequeue=1",
            "SlurmdParameters=config_overrides",
        ]
        if self.accounting:
            lines += [
                "AccountingStorageType=accounting_storage/slurmdbd",
                "AccountingStorageHost=localhost",
                f"AccountingStoragePort={dbd}",
            ]
        else:
            lines.append("AccountingStorageType=accounting_storage/none")
        for node in NODES:
            lines.append(
                f"NodeName={node} NodeHostname=localhost NodeAddr=127.0.0.1"
                f" Port={free_port()} CPUs={self.cpus} RealMemory=2000"
            )
        if self.preempt:
            lines += PREEMPT_CONF
        else:
            lines.append("PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        if self.accounting:
            self._start_accounting(dbd, db)
        self._spawn([_exe("slurmctld"), "-D", "-i", "-f", str(self.conf)], "slurmctld.out")
        _wait(
            lambda: self.run("scontrol", "ping", check=False).returncode == 0,
            60,
            "slurmctld",
            r / "log" / "slurmctld.log",
        )
        for node in NODES:
            self._spawn(
                [_exe("slurmd"), "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}.out"
            )
        _wait(self._nodes_idle, 60, "slurmd", r / "log" / f"slurmd-{NODES[0]}.log")
        return self

    def _nodes_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
        # a node in several partitions has one line per partition
        states = dict(line.split()[:2] for line in out if line.strip())
        return len(states) == len(NODES) and all(s.startswith("idle") for s in states.values())

    def _start_accounting(self, dbd: int, db: int) -> None:
        r = self.root
        datadir = r / "db"
        subprocess.run(
            [
                "mariadb-install-db",
                "--user=root",
                f"--datadir={datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
        self._spawn(
            [
                _exe("mariadbd"),
                "--no-defaults",
                "--user=root",
                f"--datadir={datadir}",
                f"--socket={r}/mysql.sock",
                f"--pid-file={r}/mysql.pid",
                f"--port={db}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=32M",
            ],
            "mariadb.out",
        )
        dbconf = r / "slurmdbd.conf"
        dbconf.write_text(
            "\n".join(
                [
                    "AuthType=auth/none",
                    "DbdHost=localhost",
                    "DbdAddr=127.0.0.1",
                    f"DbdPort={dbd}",
                    "SlurmUser=root",
                    f"LogFile={r}/log/slurmdbd.log",
                    f"PidFile={r}/slurmdbd.pid",
                    "StorageType=accounting_storage/mysql",
                    "StorageHost=127.0.0.1",
                    f"StoragePort={db}",
                    "StorageUser=root",
                    "StorageLoc=slurm_acct_db",
                ]
            )
            + "\n"
        )
        dbconf.chmod(0o600)
        _wait(lambda: (r / "mysql.sock").exists(), 60, "mariadb", r / "mariadb.out")
        # slurmdbd reads slurmdbd.conf from the folder of $SLURM_CONF
        self._spawn([_exe("slurmdbd"), "-D", "-s"], "slurmdbd.out")
        _wait(
            lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0,
            60,
            "slurmdbd",
            r / "log" / "slurmdbd.log",
        )
        cluster = self.name
        self.run("sacctmgr", "-i", "add", "cluster", cluster)
        self.run("sacctmgr", "-i", "add", "account", "research", f"cluster={cluster}")
        self.run("sacctmgr", "-i", "add", "user", "root", "account=research", f"cluster={cluster}")

    @contextmanager
    def accounting_down(self) -> Iterator[None]:
        """slurmdbd stopped while the block runs (a restart, an outage: sacct answers
        "Problem talking to the database"), then started again and answering."""
        (dbd,) = [p for p in self.procs if _exe("slurmdbd") in p.args]  # type: ignore[operator]
        _stop(dbd)
        self.procs.remove(dbd)
        try:
            yield
        finally:
            self._spawn([_exe("slurmdbd"), "-D", "-s"], "slurmdbd.out")
            _wait(
                lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0,
                60,
                "slurmdbd",
                self.root / "log" / "slurmdbd.log",
            )

    def stop(self) -> None:
        """Cancel what still runs (so no slurmstepd outlives its slurmd), then stop the
        daemons."""
        if self.procs:
            self.run("scancel", f"--user={os.getuid()}", check=False)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                out = self.run("squeue", "-h", "-t", "R,CG", check=False)
                if out.returncode != 0 or not out.stdout.strip():
                    break
                time.sleep(0.5)
        for proc in reversed(self.procs):
            _stop(proc, grace=10)
        self.procs.clear()


def wait_state(cluster: SlurmCluster, job_id: str, states: set[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = cluster.run("scontrol", "show", "job", job_id, check=False).stdout
        for word in out.split():
            if word.startswith("JobState="):
                state = word.split("=", 1)[1]
        if state in states:
            return state
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} stayed {state}")


def preempt_nodes(cluster: SlurmCluster, seconds: int = 2) -> str:
    """Submit a job of the ``urgent`` partition that needs both nodes whole (a preempting
    cluster): Slurm preempts whatever of ``spot`` and ``spotc`` runs. Its job id."""
    out = cluster.run(
        "sbatch", "--parsable", "-p", "urgent", "--exclusive", "-N2", f"--wrap=sleep {seconds}"
    )
    return out.stdout.strip().split(";", 1)[0]


def job_fields(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """``scontrol show job``'s KEY=VALUE words (the leader's, for a heterogeneous job)."""
    out = cluster.run("scontrol", "show", "job", job_id, check=False).stdout
    fields: dict[str, str] = {}
    for word in out.split():
        key, sep, value = word.partition("=")
        if sep:
            fields.setdefault(key, value)
    return fields


def requeue_hold(cluster: SlurmCluster, job_id: str) -> float:
    """Seconds a requeued job is held (Reason=BeginTime): from its requeue (Slurm's SubmitTime
    is reset to it) to its EligibleTime."""
    from datetime import datetime

    fields = job_fields(cluster, job_id)
    submit, eligible = (datetime.fromisoformat(fields[k]) for k in ("SubmitTime", "EligibleTime"))
    return (eligible - submit).total_seconds()
