"""uv's install of pinned distributions into a folder, for an image's Python and platform, and
its head start: the same install, and the packing of its files, begun while the base image is
still being read, so that the index's download, the packing and the read of the image overlap
rather than follow each other."""

from __future__ import annotations

import atexit
import contextlib
import platform as _platform
import shutil
import subprocess
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

from torchx_nb.environment.index import IndexSettings
from torchx_nb.environment.pack import EnvPack
from torchx_nb.environment.wheels import uv_bin
from torchx_nb.workspace.registry import start_upload

# a head start fetches only what is likely wanted and cheap to fetch for nothing: the image may
# turn out to have it (a base with torch must not make us download 2 GB to throw away)
HEAD_START_ITEM_BYTES = 64 * 1024 * 1024
HEAD_START_TOTAL_BYTES = 256 * 1024 * 1024


def uv_install_cmd(
    target: Path, reqs: list[str], python: str, platform: str, index: IndexSettings
) -> list[str]:
    """``uv pip install --target`` of ``reqs`` (pins or wheel files) for ``python`` on
    ``platform``: binary wheels only, no dependencies (the pins are already closed over
    them), hardlinked from uv's cache (the files are only read, to be packed). The indexes
    are not in it: uv runs with ``index.uv_env()``."""
    return [
        uv_bin(),
        "pip",
        "install",
        "--no-config",
        "--quiet",
        "--target",
        str(target),
        "--python-platform",
        platform,
        "--python-version",
        python,
        "--only-binary",
        ":all:",
        "--no-deps",
        "--link-mode",
        "hardlink",
        *index.uv_args(),
        *reqs,
    ]


def likely_platform() -> str:
    """uv's ``--python-platform`` an image most likely has, guessed before it is read: this
    machine's on Linux (images are mostly built where they run), else manylinux 2.17 on
    x86_64."""
    machine = _platform.machine() or "x86_64"
    if sys.platform != "linux" or machine not in ("x86_64", "aarch64"):
        return "x86_64-manylinux_2_17"
    libc, version = _platform.libc_ver()
    if libc == "glibc" and version.count(".") == 1:
        return f"{machine}-manylinux_{version.replace('.', '_')}"
    return f"{machine}-unknown-linux-musl" if not libc else f"{machine}-manylinux_2_17"


_RUNNING: weakref.WeakSet[HeadStart] = weakref.WeakSet()


class HeadStart:
    """An install begun before the image is known, packed as the first part of the layer as
    soon as it is done. When the image turns out to want exactly these pins for this Python
    and platform, that part is the layer's (and its bytes may already be on their way to the
    registry); otherwise it has filled uv's cache, and the real install finds the wheels
    there."""

    def __init__(
        self,
        reqs: list[str],
        python: str,
        platform: str,
        index: IndexSettings,
        upload_to: str | None = None,
        check: Callable[[Path], bool] | None = None,
    ) -> None:
        self.what = (tuple(reqs), python, platform, index)
        self._check = check  # whether the installed folder is what the layer may hold
        self._upload_to = upload_to
        self._streaming = False  # its bytes are on their way (one upload, whoever starts it)
        self._lock = threading.Lock()
        self._tmp = Path(tempfile.mkdtemp(prefix="torchx-nb-env-head-"))
        self._stop = threading.Event()
        self._pack: EnvPack | None = None  # packed, waiting for the image's hook
        self._packing: EnvPack | None = EnvPack()
        try:
            self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                uv_install_cmd(self._tmp / "site", reqs, python, platform, index),
                env=index.uv_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError:
            self._packing.abort()
            shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._installed = threading.Event()
        # Set when _run has returned. Waited on instead of Thread.join(): on CPython 3.11 a
        # join interrupted by Ctrl-C marks the still-running thread as stopped, so a second
        # join returns at once and the cancel raced the thread's own abort of the layer.
        self._finished = threading.Event()
        self._thread = threading.Thread(target=self._run, name="torchx-nb-env-head", daemon=True)
        self._thread.start()
        _RUNNING.add(self)

    def _run(self) -> None:
        try:
            self._install_and_pack()
        finally:
            self._finished.set()

    def _install_and_pack(self) -> None:
        proc = self._proc
        try:
            ok = proc is not None and proc.wait() == 0
            if ok and self._check is not None and not self._stop.is_set():
                ok = self._check(self._tmp / "site")
        except Exception:
            ok = False
        finally:
            self._installed.set()
        pack = self._packing
        if pack is None:
            return
        if ok and self._upload_to is not None:
            repo = self._upload_to
            self._stream(pack, lambda chunks: start_upload(repo, chunks))
        done = False
        with contextlib.suppress(OSError, ValueError):  # the real install will say what it is
            done = (
                ok
                and not self._stop.is_set()
                and pack.add_folder(self._tmp / "site", self._stop.is_set)
            )
        if done:
            self._pack = pack
        else:
            pack.abort()
        self._packing = None

    def take(
        self,
        reqs: list[str],
        python: str,
        platform: str,
        index: IndexSettings,
        report: Callable[[int, int], None] | None = None,
        stream: Callable[[Iterator[bytes]], None] | None = None,
    ) -> EnvPack | None:
        """The layer begun with these pins, when they are the ones this started with (None
        otherwise, once uv's cache is filled); ``report`` hears the rest of its packing and
        ``stream`` is handed its bytes as they are written."""
        pack = None
        try:
            if self.what == (tuple(reqs), python, platform, index):
                begun = self._packing or self._pack
                if begun is not None:
                    begun.report = report
                    if stream is not None:
                        self._stream(begun, stream)
                self._finished.wait()
                pack, self._pack = self._pack, None
            else:
                self._installed.wait()
        finally:  # taken, or interrupted while waiting (Ctrl-C): nothing of it stays
            self.cancel()
        return pack

    def _stream(self, pack: EnvPack, stream: Callable[[Iterator[bytes]], None]) -> None:
        """Hand the pack's bytes to ``stream``, unless they are already on their way (to the
        build's repository, as soon as the install was done)."""
        with self._lock:
            if self._streaming:
                return
            self._streaming = True
        stream(pack.follow())

    def cancel(self) -> None:
        """Stop it (the image did not want it, or the layer was cached) and remove what it
        made."""
        self._stop.set()
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if self._thread is not threading.current_thread():
            self._finished.wait()
        for pack in (self._pack, self._packing):
            if pack is not None:
                pack.abort()
        self._pack = self._packing = None
        shutil.rmtree(self._tmp, ignore_errors=True)


@atexit.register
def _stop_running() -> None:
    for head in list(_RUNNING):
        head.cancel()


def head_start(
    pins: list[tuple[str, int]],
    python: str,
    platform: str,
    index: IndexSettings,
    upload_to: str | None = None,
    check: Callable[[Path], bool] | None = None,
) -> HeadStart | None:
    """A head start for ``pins`` (pin, installed size), or None: none of them is small
    enough, or the same were fetched on this machine before (uv's cache has them; a
    re-submit must not pay for a second install it throws away). ``upload_to``: the
    repository the build will push to, where the packed bytes go as they are written (an
    upload the build does not take is cancelled with the head start); ``check``: whether
    the installed folder may be packed (else the head start only fills uv's cache)."""
    import hashlib
    import json

    from torchx_nb.paths import data_dir, private_dir

    chosen: list[str] = []
    total = 0
    for pin, size in pins:
        if size <= HEAD_START_ITEM_BYTES and total + size <= HEAD_START_TOTAL_BYTES:
            chosen.append(pin)
            total += size
    if not chosen:
        return None
    doc = json.dumps([sorted(chosen), python, platform, index.fingerprint()])
    mark = private_dir(data_dir() / "env-fetched") / hashlib.sha256(doc.encode()).hexdigest()
    if mark.exists():
        return None
    try:
        started = HeadStart(chosen, python, platform, index, upload_to, check)
    except OSError:
        return None
    mark.touch()
    return started
