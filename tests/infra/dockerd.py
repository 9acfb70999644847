"""Real Docker parts on an offline machine: a private dockerd (no bridge, no iptables), a local
registry on 127.0.0.1, and base images built from Debian packages (nothing is pulled).

Images are cached: the daemon's data root lives under ``~/.cache/torchx_nb/docker-data`` and the
base images' root filesystems under ``~/.cache/torchx_nb/base-images``."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CACHE = Path(os.environ.get("TORCHX_NB_CACHE", Path.home() / ".cache" / "torchx_nb"))
BUSYBOX_IMAGE = "localhost/torchx-nb-base/busybox:1"
PYTHON_IMAGE = "localhost/torchx-nb-base/python:3.11"
BUSYBOX_APPLETS = [
    "sh",
    "echo",
    "cat",
    "ls",
    "sleep",
    "env",
    "pwd",
    "mkdir",
    "rm",
    "test",
    "true",
    "false",
    "wc",
    "grep",
    "head",
    "tail",
    "id",
    "kill",
    "seq",
    "printf",
]


def docker_available() -> str | None:
    """None when every part is installed, else why not and how to fix it."""
    for exe in ("dockerd", "docker-init", "docker-registry", "busybox", "debootstrap"):
        if shutil.which(exe) is None and not Path(f"/usr/sbin/{exe}").exists():
            return f"{exe} is not installed: run scripts/infra/install-debian-packages.sh"
    if os.geteuid() != 0:
        return "dockerd needs root here"
    return None


def host_python() -> tuple[list[str], str]:
    """This machine's Python prefixes (with torch) and the PATH that finds them first, for
    containers that borrow them through read-only binds: no torch image can be pulled offline."""
    import sys

    prefixes = sorted({sys.prefix, sys.base_prefix})
    path = ":".join([*(f"{p}/bin" for p in prefixes), "/usr/local/bin", "/usr/bin", "/bin"])
    return prefixes, path


def host_python_mounts() -> tuple[list[str], str]:
    """``host_python`` as ``cell(mounts=...)`` arguments (bind mounts at the same paths)."""
    prefixes, path = host_python()
    mounts = [f for p in prefixes for f in ("type=bind", f"src={p}", f"dst={p}", "readonly")]
    return mounts, path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(predicate: Any, timeout: float, what: str, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(0.2)
    tail = ""
    if log and log.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    raise RuntimeError(f"{what} did not come up within {timeout:.0f}s\n{tail}")


def _stop(proc: subprocess.Popen[bytes], grace: float = 15) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class DockerDaemon:
    """A dockerd of our own on a private socket."""

    socket_path: Path
    proc: subprocess.Popen[bytes] | None
    log: Path
    lock_fd: int | None = None
    private_root: Path | None = None  # a data root of its own (all slots taken): removed at stop

    @property
    def base_url(self) -> str:
        return f"unix://{self.socket_path}"

    @property
    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.base_url}

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.base_url, timeout=300)

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None
        if self.private_root is not None:
            shutil.rmtree(self.private_root, ignore_errors=True)
            self.private_root = None


# cached data roots: one per dockerd running at once on this machine (a parallel run's workers,
# two runs), each kept warm between runs; past these a dockerd gets a private one
DATA_ROOT_SLOTS = 8


def _claim_data_root(state_dir: Path) -> tuple[Path, Path, int | None]:
    """(data root, pid file, lock fd). A cached data root is used by one dockerd at a time,
    under an exclusive flock held until ``stop``: the first free of ``DATA_ROOT_SLOTS`` slots
    (``docker-data``, ``docker-data-1``...), so each worker of a parallel run and each of two
    runs on one machine finds its base images already there without stopping another's daemon;
    when all are taken, a data root of its own under ``state_dir``. A daemon left on a slot by
    a run that died (its pid file names a live dockerd while nobody holds the lock) is stopped
    first."""
    import fcntl

    base = Path(os.environ.get("TORCHX_NB_DOCKER_DATA", CACHE / "docker-data"))
    for slot in range(DATA_ROOT_SLOTS):
        data_root = base if slot == 0 else base.with_name(f"{base.name}-{slot}")
        data_root.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(str(data_root) + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        data_root.mkdir(exist_ok=True)
        pidfile = data_root.parent / ("dockerd.pid" if slot == 0 else f"dockerd-{slot}.pid")
        _stop_stale(pidfile)
        return data_root, pidfile, fd
    private = state_dir / "docker-data"
    private.mkdir(parents=True, exist_ok=True)
    return private, state_dir / "dockerd.pid", None


def _stop_stale(pidfile: Path) -> None:
    """Stop the dockerd a dead run left on a slot (its pid file), before the slot is reused."""
    if pidfile.exists():
        try:
            old = int(pidfile.read_text().strip())
            os.kill(old, signal.SIGTERM)
            for _ in range(100):
                os.kill(old, 0)
                time.sleep(0.1)
        except (ValueError, ProcessLookupError, PermissionError):
            pass
        pidfile.unlink(missing_ok=True)


def start_dockerd(state_dir: Path) -> DockerDaemon:
    """Start dockerd (overlay2, host networking only) with the cached data root.

    One dockerd may own a data root; see ``_claim_data_root`` for how two runs share a machine."""
    state_dir.mkdir(parents=True, exist_ok=True)
    data_root, pidfile, lock_fd = _claim_data_root(state_dir)
    sock = state_dir / "docker.sock"
    exec_root = Path(tempfile.mkdtemp(prefix="dkx", dir="/tmp"))
    log = state_dir / "dockerd.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                "dockerd",
                "--host",
                f"unix://{sock}",
                "--data-root",
                str(data_root),
                "--exec-root",
                str(exec_root),
                "--pidfile",
                str(pidfile),
                "--bridge=none",
                "--iptables=false",
                "--ip-masq=false",
                "--storage-driver=overlay2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    daemon = DockerDaemon(sock, proc, log, lock_fd, None if lock_fd is not None else data_root)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("dockerd exited")
        return bool(daemon.client().ping())

    try:
        _wait(up, 60, "dockerd", log)
    except Exception:
        daemon.stop()
        raise
    return daemon


@dataclass
class Registry:
    """Debian's docker-registry (distribution) on 127.0.0.1."""

    host: str
    proc: subprocess.Popen[bytes]
    root: Path
    user: str | None = None
    password: str | None = None
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def stop(self) -> None:
        _stop(self.proc, 5)


def start_registry(
    state_dir: Path, user: str | None = None, password: str | None = None, port: int = 0
) -> Registry:
    """A registry on a free loopback port (or ``port``, to restart one where it was); with
    ``user``/``password`` it requires basic auth."""
    state_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    auth = ""
    if user and password:
        import bcrypt

        hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
        (state_dir / "htpasswd").write_text(f"{user}:{hashed}\n")
        auth = (
            f"auth:\n  htpasswd:\n    realm: torchx-nb-test\n    path: {state_dir / 'htpasswd'}\n"
        )
    config = state_dir / "config.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {state_dir / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n{auth}"
    )
    log = state_dir / "registry.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    reg = Registry(f"127.0.0.1:{port}", proc, state_dir, user, password)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("docker-registry exited")
        try:
            urllib.request.urlopen(f"{reg.url}/v2/", timeout=2)
        except urllib.error.HTTPError as e:
            return e.code == 401
        return True

    try:
        _wait(up, 30, "docker-registry", log)
    except Exception:
        reg.stop()
        raise
    return reg


def _debian_mirror() -> str:
    """The Debian mirror apt already uses on this machine."""
    for path in [Path("/etc/apt/sources.list"), *Path("/etc/apt/sources.list.d").glob("*")]:
        if not path.is_file() or path.suffix not in ("", ".list", ".sources"):
            continue
        for line in path.read_text().splitlines():
            line = line.strip()
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
            if line.startswith("deb ") and "security" not in line:
                return next(w for w in line.split()[1:] if "://" in w)
    raise RuntimeError("no Debian mirror configured for apt")


@contextmanager
def _building(dest: Path) -> Iterator[None]:
    """Hold ``dest``'s build lock: the workers of a parallel run (or two runs) that all find
    a base image missing build its root filesystem once; the others wait, then reuse it."""
    import fcntl

    with open(dest / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _busybox_rootfs(dest: Path) -> Path:
    tarball = dest / "busybox-rootfs.tar"
    if tarball.exists():
        return tarball
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "bin").mkdir()
        (root / "tmp").mkdir(mode=0o1777)
        shutil.copy2("/bin/busybox", root / "bin" / "busybox")
        for applet in BUSYBOX_APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        partial = tarball.with_suffix(".partial")
        with tarfile.open(partial, "w") as tar:
            tar.add(root, arcname=".")
        partial.rename(tarball)
    return tarball


def _python_rootfs(dest: Path, extra: str = "", name: str = "python") -> Path:
    tarball = dest / f"{name}-bookworm-rootfs.tar"
    if tarball.exists():
        return tarball
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        root = Path(tmp) / "rootfs"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include=python3-minimal,python3{extra}",
                "bookworm",
                str(root),
                _debian_mirror(),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for junk in (
            "var/cache/apt/archives",
            "var/lib/apt/lists",
            "usr/share/doc",
            "usr/share/man",
            "usr/share/locale",
        ):
            shutil.rmtree(root / junk, ignore_errors=True)
        (root / "usr/bin/python").unlink(missing_ok=True)
        (root / "usr/bin/python").symlink_to("python3")
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)
    return tarball


PYTHON_PIP_IMAGE = "localhost/torchx-nb-base/python-pip:3.11"


def python_pip_image(client: Any) -> str:
    """The python base with Debian's python3-pip (TorchX's way to add packages needs pip in
    the image), imported into the daemon if missing."""
    import docker

    try:
        client.images.get(PYTHON_PIP_IMAGE)
    except docker.errors.ImageNotFound:
        dest = CACHE / "base-images"
        dest.mkdir(parents=True, exist_ok=True)
        with _building(dest):
            tarball = _python_rootfs(dest, ",python3-pip", "python-pip")
        repo, tag = PYTHON_PIP_IMAGE.rsplit(":", 1)
        with open(tarball, "rb") as f:
            client.api.import_image_from_data(
                f.read(),
                repository=repo,
                tag=tag,
                changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            )
    return PYTHON_PIP_IMAGE


def build_base_images(client: Any) -> dict[str, str]:
    """Import the busybox and python base images into the daemon, if missing."""
    import docker

    dest = CACHE / "base-images"
    dest.mkdir(parents=True, exist_ok=True)
    images = {
        "busybox": (BUSYBOX_IMAGE, _busybox_rootfs, "ENV PATH=/bin"),
        "python": (
            PYTHON_IMAGE,
            _python_rootfs,
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
    }
    out = {}
    for key, (name, make, change) in images.items():
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            with _building(dest):
                tarball = make(dest)
            repo, tag = name.rsplit(":", 1)
            with open(tarball, "rb") as f:
                client.api.import_image_from_data(
                    f.read(), repository=repo, tag=tag, changes=[change]
                )
        out[key] = name
    return out
