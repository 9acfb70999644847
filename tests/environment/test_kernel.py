"""Where an installed distribution came from (PEP 610's direct_url.json, INSTALLER), whether it
is pure, and a wheel packed back from what the kernel has installed."""

from __future__ import annotations

import importlib.metadata as md
import json
import zipfile
from pathlib import Path

import pytest

from torchx_nb.environment.index import IndexSettings
from torchx_nb.environment.kernel import KernelDist, _pure, _source
from torchx_nb.environment.plan import EnvPlan
from torchx_nb.specs.api import TorchxNbError


def _dist(tmp_path: Path, name: str, **files: str) -> md.Distribution:
    info = tmp_path / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    for fname, text in files.items():
        (info / fname.replace("__", ".")).write_text(text)
    return md.PathDistribution(info)


@pytest.mark.parametrize(
    ("direct_url", "installer", "expected"),
    [
        (
            {"url": "file:///src/pkg", "dir_info": {"editable": True}},
            "pip",
            ("editable", "/src/pkg"),
        ),
        ({"url": "file:///src/pkg", "dir_info": {}}, "pip", ("local", "/src/pkg")),
        (
            {"url": "file:///w/p-1.0-py3-none-any.whl", "archive_info": {}},
            "pip",
            ("archive", "/w/p-1.0-py3-none-any.whl"),
        ),
        (
            {"url": "https://git.example/p.git", "vcs_info": {"vcs": "git", "commit_id": "ab"}},
            "pip",
            ("vcs", None),
        ),
        (None, "conda", ("conda", None)),
        (None, "pip", ("index", None)),
    ],
)
def test_where_a_distribution_came_from(
    tmp_path: Path,
    direct_url: dict[str, object] | None,
    installer: str,
    expected: tuple[str, str | None],
) -> None:
    files = {"INSTALLER": installer + "\n"}
    if direct_url is not None:
        files["direct_url__json"] = json.dumps(direct_url)
    assert _source(_dist(tmp_path, "p", **files)) == expected


def test_purity_from_wheel_and_files(tmp_path: Path) -> None:
    assert _pure(_dist(tmp_path / "a", "a", WHEEL="Root-Is-Purelib: true\n", RECORD="a.py,,\n"))
    assert not _pure(_dist(tmp_path / "b", "b", WHEEL="Root-Is-Purelib: false\n"))
    assert not _pure(_dist(tmp_path / "c", "c", RECORD="c/_x.cpython-311-x86_64-linux-gnu.so,,\n"))


def test_a_plan_shows_index_credentials_masked() -> None:
    index = IndexSettings(
        "https://alice:t0ken-s3cret@idx.example/simple", ("https://bob:pw@extra.example/s",)
    )
    plan = EnvPlan("auto", "base:1", None, index)
    assert "t0ken-s3cret" not in plan.table() and "pw@" not in plan.table()
    assert "https://****@idx.example/simple, https://****@extra.example/s" in plan.table()


def test_a_wheel_is_packed_back_from_installed_files_and_a_compiled_one_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchx_nb.environment import wheels

    site = tmp_path / "site"
    (site / "tnbpacked").mkdir(parents=True)
    (site / "tnbpacked" / "__init__.py").write_text("V = 1\n")
    info = site / "tnbpacked-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tnbpacked\nVersion: 2.0\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text(
        "tnbpacked/__init__.py,,\ntnbpacked-2.0.dist-info/METADATA,,\n"
        "tnbpacked-2.0.dist-info/WHEEL,,\ntnbpacked-2.0.dist-info/INSTALLER,,\n"
        "tnbpacked-2.0.dist-info/RECORD,,\n../../bin/tnbpacked,,\n"
    )
    monkeypatch.syspath_prepend(str(site))
    dist = KernelDist("tnbpacked", "2.0", "index", None, True, 10, "cell")
    out = tmp_path / "out"
    out.mkdir()
    wheel = wheels.repack_installed(dist, out)
    assert wheel.name == "tnbpacked-2.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(zf.namelist())
        record = zf.read("tnbpacked-2.0.dist-info/RECORD").decode()
    assert names == [
        "tnbpacked-2.0.dist-info/METADATA",
        "tnbpacked-2.0.dist-info/RECORD",
        "tnbpacked-2.0.dist-info/WHEEL",
        "tnbpacked/__init__.py",
    ]
    assert "tnbpacked/__init__.py,sha256=" in record and "INSTALLER" not in record
    again = wheels.repack_installed(dist, tmp_path)  # reproducible
    assert again.read_bytes() == wheel.read_bytes()
    compiled = KernelDist("tnbpacked", "2.0", "index", None, False, 10, "cell")
    with pytest.raises(TorchxNbError, match="is compiled and no index serves it"):
        wheels.repack_installed(compiled, out)


def test_a_distribution_named_as_its_module_is_found_without_reading_them_all() -> None:
    """The quick lookup (the distribution of the module's own name, in the module's folder,
    whose RECORD lists its file) agrees with reading every installed distribution, for every
    top-level module this environment has; where it cannot tell, it says nothing."""
    import importlib.util

    from torchx_nb.environment.kernel import _named_provider

    found = 0
    for module, names in sorted(md.packages_distributions().items()):
        if not module.isidentifier():
            continue
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        named = _named_provider(module, spec)
        if named is not None:
            assert named in names, (module, named, names)
            found += 1
    assert found >= 20  # numpy, requests, pandas, … on any machine that runs these tests
    assert _named_provider("yaml", importlib.util.find_spec("yaml")) is None  # PyYAML's
