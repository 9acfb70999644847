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
    """A partial layer and a head start's folder from a build killed a day ago go when the
    next layer is begun; today's (perhaps another kernel's, still being written) stay."""
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
    for path in (stale_head, fresh_head):
        (path / "site").mkdir(parents=True)
    for path in (stale_partial, stale_head):
        os.utime(path, (old, old))
    pack = EnvPack()
    pack.abort()
    assert not stale_partial.exists() and not stale_head.exists()
    assert fresh_partial.exists() and fresh_head.exists()
