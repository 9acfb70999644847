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
