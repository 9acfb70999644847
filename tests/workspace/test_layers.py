from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tarfile
from pathlib import Path

from torchx_nb.workspace.collect import collect_workspace
from torchx_nb.workspace.layers import build_file_layer, build_layer


def make_ws(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "m.py").write_text("print('m')\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o700)
    (root / "data.csv").write_text("a,b\n1,2\n")
    return root


def test_same_files_same_digest_anywhere(tmp_path: Path) -> None:
    a = make_ws(tmp_path / "a")
    b = tmp_path / "elsewhere" / "b"
    shutil.copytree(a, b)
    os.utime(b / "data.csv", (1_000_000, 1_000_000))
    os.chmod(b / "pkg" / "m.py", 0o664)
    la = build_layer(collect_workspace(a), "workspace", cache=tmp_path / "ca")
    lb = build_layer(collect_workspace(b), "workspace", cache=tmp_path / "cb")
    assert la.digest == lb.digest and la.diff_id == lb.diff_id
    assert la.digest == "sha256:" + hashlib.sha256(la.path.read_bytes()).hexdigest()
    assert (
        la.diff_id == "sha256:" + hashlib.sha256(gzip.decompress(la.path.read_bytes())).hexdigest()
    )
    with tarfile.open(la.path) as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == [
        "workspace",
        "workspace/data.csv",
        "workspace/pkg",
        "workspace/pkg/m.py",
        "workspace/run.sh",
    ]
    assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" for m in members)
    modes = {m.name: m.mode for m in members}
    assert modes["workspace/run.sh"] == 0o755 and modes["workspace/pkg/m.py"] == 0o644


def test_layer_cache_and_changes(tmp_path: Path) -> None:
    ws = make_ws(tmp_path / "w")
    first = build_layer(collect_workspace(ws), "app", cache=tmp_path / "c")
    again = build_layer(collect_workspace(ws), "app", cache=tmp_path / "c")
    assert again == first
    (ws / "data.csv").write_text("a,b\n1,3\n")
    changed = build_layer(collect_workspace(ws), "app", cache=tmp_path / "c")
    assert changed.digest != first.digest


def test_file_layer_is_small_and_reproducible(tmp_path: Path) -> None:
    one = build_file_layer({".torchx/cell-abc.py": b"print(1)\n"}, "workspace", tmp_path)
    two = build_file_layer({".torchx/cell-abc.py": b"print(1)\n"}, "workspace", tmp_path)
    assert one.digest == two.digest and one.size < 300


def test_a_layer_written_in_parts_can_be_followed_as_it_is_written(tmp_path: Path) -> None:
    """A follower on another thread reads the compressed bytes while two threads add parts:
    what it reads is the layer (its digest), in pieces of the size asked for except the last;
    a layer given up ends its follower with ``LayerAborted``."""
    import threading

    from torchx_nb.workspace.layers import LayerAborted, LayerWriter

    blobs = [(f"f{i}.bin", os.urandom(300_000) * 3) for i in range(12)]
    writer = LayerWriter(tmp_path / "l.tar.gz", 1, fast=True)
    got: list[bytes] = []
    follower = threading.Thread(target=lambda: got.extend(writer.follow(1 << 20)))
    follower.start()
    first = threading.Thread(target=writer.add, args=([(n, d, 0o644, None) for n, d in blobs[:6]],))
    first.start()
    first.join()
    writer.add([(n, d, 0o644, None) for n, d in blobs[6:]])
    layer = writer.close()
    follower.join(timeout=30)
    data = b"".join(got)
    assert "sha256:" + hashlib.sha256(data).hexdigest() == layer.digest
    assert data == layer.path.read_bytes() and len(got) >= 3
    assert all(len(piece) == 1 << 20 for piece in got[:-1])
    with tarfile.open(layer.path) as tar:
        assert [m.name for m in tar.getmembers()] == [n for n, _ in blobs]

    given_up = LayerWriter(tmp_path / "g.tar.gz", 1, fast=True)
    errors: list[BaseException] = []

    def follow() -> None:
        try:
            list(given_up.follow())
        except LayerAborted as e:
            errors.append(e)

    waiting = threading.Thread(target=follow)
    waiting.start()
    given_up.add([(n, d, 0o644, None) for n, d in blobs[:2]])
    given_up.abort()
    waiting.join(timeout=30)
    assert len(errors) == 1 and not (tmp_path / "g.tar.gz").exists()
