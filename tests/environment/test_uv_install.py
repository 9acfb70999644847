"""The head start: the index's pins installed and packed while the image is still being read,
taken when the image wants exactly them, and otherwise dropped without a trace (no install
folder, no partial layer, no uv left running); small pins only, and once per machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.kernel_venv import _project, build_wheel
from torchx_nb.environment.index import IndexSettings
from torchx_nb.environment.uv_install import HeadStart, head_start


@pytest.fixture()
def links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> IndexSettings:
    """A find-links folder serving tnbfast 1.0, and a data folder of the test's own."""
    monkeypatch.setenv("TORCHX_NB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("UV_CACHE_DIR", str(tmp_path / "uv-cache"))
    wheels = tmp_path / "wheels"
    build_wheel(_project(tmp_path, "tnbfast", "1.0", [], {"tnbfast.py": "X = 1\n"}), wheels)
    return IndexSettings(no_index=True, find_links=(str(wheels),))


def _left(tmp_path: Path) -> list[Path]:
    from torchx_nb.workspace.layers import cache_dir

    return sorted(cache_dir().glob("*.partial"))


def test_taken_when_the_image_wants_exactly_its_pins(links: IndexSettings, tmp_path: Path) -> None:
    head = HeadStart(["tnbfast==1.0"], "3.11", "x86_64-manylinux_2_17", links)
    pack = head.take(["tnbfast==1.0"], "3.11", "x86_64-manylinux_2_17", links)
    assert pack is not None
    layer = pack.finish("usr/lib/python3/dist-packages")
    import tarfile

    with tarfile.open(layer.path) as tar:
        names = tar.getnames()
    assert "opt/torchx-nb/env/tnbfast.py" in names
    site = "usr/lib/python3/dist-packages"
    assert set(names[-2:]) == {f"{site}/_torchx_nb_env.py", f"{site}/torchx-nb-env.pth"}
    assert not head._tmp.exists()
    layer.path.unlink()
    assert _left(tmp_path) == []


@pytest.mark.parametrize("how", ["other pins", "other platform", "cancelled"])
def test_dropped_without_a_trace_otherwise(links: IndexSettings, tmp_path: Path, how: str) -> None:
    head = HeadStart(["tnbfast==1.0"], "3.11", "x86_64-manylinux_2_17", links)
    if how == "cancelled":
        head.cancel()  # the layer was cached, or the build failed before it was needed
    elif how == "other pins":
        assert head.take([], "3.11", "x86_64-manylinux_2_17", links) is None
    else:
        assert head.take(["tnbfast==1.0"], "3.11", "aarch64-manylinux_2_17", links) is None
    assert not head._tmp.exists() and head._proc is None
    assert _left(tmp_path) == []


def test_small_pins_only_and_once_per_machine(links: IndexSettings) -> None:
    from torchx_nb.environment.uv_install import HEAD_START_ITEM_BYTES

    assert head_start([("torch==2.5.0", 2 * HEAD_START_ITEM_BYTES)], "3.11", "p", links) is None
    first = head_start(
        [("tnbfast==1.0", 10_000), ("torch==2.5.0", 2 * HEAD_START_ITEM_BYTES)],
        "3.11",
        "x86_64-manylinux_2_17",
        links,
    )
    assert first is not None and first.what[0] == ("tnbfast==1.0",)
    first.cancel()
    again = head_start([("tnbfast==1.0", 10_000)], "3.11", "x86_64-manylinux_2_17", links)
    assert again is None  # uv's cache has them: a re-submit pays for no second install


def test_what_a_killed_build_left_is_swept_once_it_is_a_day_old(
    links: IndexSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partial layer, a head start's folder, the build's own install folder (all that uv
    installed: gigabytes for a large environment) and a requirements file's resolution
    folder from a build killed a day ago go when the next layer is begun; today's (perhaps
    another kernel's, still being written) stay."""
    import os
    import tempfile
    import time

    from torchx_nb.environment.pack import STALE_SECONDS, EnvPack
    from torchx_nb.workspace.layers import cache_dir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    old = time.time() - STALE_SECONDS - 60
    stale_partial = cache_dir() / "killed.partial"
    stale_head = tmp_path / "tmp" / "torchx-nb-env-head-killed"
    fresh_partial = cache_dir() / "writing.partial"
    fresh_head = tmp_path / "tmp" / "torchx-nb-env-head-writing"
    for path in (stale_partial, fresh_partial):
        path.write_bytes(b"x")
    stale_build = tmp_path / "tmp" / "torchx-nb-env-k1ll3d"
    stale_reqs = tmp_path / "tmp" / "torchx-nb-reqs-k1ll3d"
    fresh_build = tmp_path / "tmp" / "torchx-nb-env-wr1t1n"
    for path in (stale_head, fresh_head, stale_build, stale_reqs, fresh_build):
        (path / "site").mkdir(parents=True)
    for path in (stale_partial, stale_head, stale_build, stale_reqs):
        os.utime(path, (old, old))
    pack = EnvPack()
    pack.abort()
    assert not stale_partial.exists() and not stale_head.exists()
    assert not stale_build.exists() and not stale_reqs.exists()
    assert fresh_partial.exists() and fresh_head.exists() and fresh_build.exists()


_INTERRUPTED = """
import os, signal, sys, threading
from torchx_nb.environment.index import IndexSettings
from torchx_nb.environment.uv_install import HeadStart

index = IndexSettings(index_url=sys.argv[1])
head = HeadStart(["tnbslow==1.0"], "3.11", "x86_64-manylinux_2_17", index)
threading.Timer(2.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:  # the build takes it while uv still waits on the index; Ctrl-C (a kernel interrupt)
    head.take(["tnbslow==1.0"], "3.11", "x86_64-manylinux_2_17", index)
except KeyboardInterrupt:
    pass
import time
time.sleep(1.0)
uv = []
for pid in os.listdir("/proc"):
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    if int(stat.rpartition(")")[2].split()[1]) == os.getpid():
        uv.append(open(f"/proc/{pid}/cmdline").read().replace(chr(0), " "))
print("children:", uv)
print("left:", sorted(os.listdir(os.environ["TMPDIR"])))
"""


def test_an_interrupted_take_leaves_no_uv_running_and_no_install_folder(tmp_path: Path) -> None:
    """Ctrl-C while the build waits for the head start (uv still fetching from a slow index):
    the head start is dropped at once, as on every other way out: no uv left running in the
    kernel, no install folder."""
    import http.server
    import os
    import subprocess
    import sys
    import threading
    import time

    from tests.infra.kernel_venv import with_this_tree

    stop = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # an index that does not answer for a long while
            stop.wait(30)
            self.send_error(503)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = with_this_tree(
        {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))},
            "TMPDIR": str(tmp),
            "TORCHX_NB_DATA_DIR": str(tmp_path / "data"),
            "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        }
    )
    try:
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", _INTERRUPTED, f"http://127.0.0.1:{server.server_port}/simple"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
    finally:
        stop.set()
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert "children: []" in proc.stdout, proc.stdout
    assert "left: []" in proc.stdout, proc.stdout
    assert time.monotonic() - started < 25  # dropped at once, not when uv gave up


_INTERRUPTED_WHILE_DROPPING = """
import os, signal, sys, threading, time
import torchx_nb.environment.uv_install as uv_install
from torchx_nb.environment.index import IndexSettings
from torchx_nb.environment.pack import EnvPack

uv_install.uv_install_cmd = lambda *args: ["false"]  # the install fails at once
calls = []
real_abort = EnvPack.abort
def slow_abort(self):  # the head start's own thread is still dropping its layer...
    calls.append(threading.current_thread().name)
    time.sleep(1.5)
    real_abort(self)
    calls.append("done")
EnvPack.abort = slow_abort
index = IndexSettings(no_index=True)
head = uv_install.HeadStart(["tnbx==1.0"], "3.11", "x86_64-manylinux_2_17", index)
threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
try:  # ...when Ctrl-C interrupts the build's wait for it
    head.take(["tnbx==1.0"], "3.11", "x86_64-manylinux_2_17", index)
except KeyboardInterrupt:
    pass
print("calls:", calls)
"""


def test_ctrl_c_while_the_head_start_drops_its_layer_waits_for_it_and_drops_it_once(
    tmp_path: Path,
) -> None:
    """CPython 3.11 marks a thread as stopped when Ctrl-C interrupts a join() of it, so a
    second join returned at once and the cancel aborted the layer while the head start's own
    thread was still aborting it (CI: "I/O operation on closed file", the build failed). The
    cancel waits for the thread's real end: one abort, finished before take() returns."""
    import os
    import subprocess
    import sys

    from tests.infra.kernel_venv import with_this_tree

    env = with_this_tree({**os.environ, "TORCHX_NB_DATA_DIR": str(tmp_path / "data")})
    proc = subprocess.run(
        [sys.executable, "-c", _INTERRUPTED_WHILE_DROPPING],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "calls: ['torchx-nb-env-head', 'done']" in proc.stdout, proc.stdout + proc.stderr


def test_a_layer_given_up_twice_at_once_is_given_up_once(tmp_path: Path) -> None:
    """Two threads giving up the same layer (a cancel and the writer's own way out): neither
    raises and the file is gone."""
    import threading

    from torchx_nb.workspace.layers import LayerWriter

    writer = LayerWriter(tmp_path / "layer.tar.gz")
    writer.add([(f"f{i}", bytes(200_000), 0o644, None) for i in range(20)])
    errors: list[BaseException] = []

    def give_up() -> None:
        try:
            writer.abort()
        except BaseException as e:  # reported by the assert below
            errors.append(e)

    threads = [threading.Thread(target=give_up) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert not (tmp_path / "layer.tar.gz").exists()
