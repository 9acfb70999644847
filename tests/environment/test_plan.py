"""The environment plan: the diff against the image, the local-label rule, the Python checks,
the one-line refusals, ``--packages FILE`` and the index settings (credentials masked)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.infra.kernel_venv import KernelVenv
from torchx_nb.environment.index import IndexSettings, mask_url
from torchx_nb.environment.kernel import KernelDist
from torchx_nb.environment.lockfile import FilePin
from torchx_nb.environment.pip_config import _parse
from torchx_nb.environment.plan import EnvPlan, PlanItem, check_pin, check_python, diff
from torchx_nb.environment.requirements import check_packages_option, pins_from_file
from torchx_nb.specs.api import TorchxNbError
from torchx_nb.workspace.image_contents import ImageContents


def _dist(name: str, version: str, pure: bool = True, source: str = "index") -> KernelDist:
    return KernelDist(name, version, source, None, pure, 1000, "cell")


def _plan(image: dict[str, str], python: str | None = "3.11", *wanted: KernelDist) -> EnvPlan:
    contents = ImageContents(python, "/usr", ("/usr/lib/python3/dist-packages",), image)
    plan = EnvPlan("auto", "base:1", contents, IndexSettings())
    plan.wanted = [PlanItem(d.name, d.version, "", d.size, d) for d in wanted]
    return plan


def test_only_what_the_image_lacks_or_has_at_another_version_is_added() -> None:
    plan = _plan(
        {"torch": "2.5.0+cu121", "numpy": "1.26.4", "pandas": "2.1.0"},
        "3.11",
        _dist("torch", "2.5.0+cpu", pure=False),
        _dist("numpy", "1.26.4", pure=False),
        _dist("Pandas", "2.2.0"),
        _dist("tqdm", "4.66.0", source="editable"),
    )
    diff(plan)
    assert [(i.name, i.version, i.reason) for i in plan.add] == [
        ("Pandas", "2.2.0", "image has 2.1.0"),
        ("tqdm", "4.66.0", "missing; built from the kernel's editable install"),
    ]
    assert plan.kept == [("torch", "2.5.0+cu121"), ("numpy", "1.26.4")]
    assert plan.warnings == [
        "keeping torch 2.5.0+cu121 from the image (the kernel has 2.5.0+cpu, the same release"
        " with another local label)"
    ]
    assert plan.summary().startswith("2 to add (2 KB): Pandas 2.2.0, tqdm 4.66.0; 2 kept")
    rows = plan.table().splitlines()
    assert (
        rows[0]
        == "environment plan for base:1 (Python 3.11, x86_64-manylinux_2_17, layer hooked in at /usr/lib/python3/dist-packages)"
    )
    assert ["Pandas", "2.2.0", "1", "KB", "image", "has", "2.1.0"] in [r.split() for r in rows]


def test_what_a_dockerfile_installed_stays_whatever_its_version() -> None:
    plan = _plan({"pandas": "2.0.0"}, "3.11", _dist("pandas", "2.2.0"))
    diff(plan, frozenset({"pandas"}))
    assert plan.add == [] and plan.kept == [("pandas", "2.0.0")]


def test_binary_wheels_need_the_image_s_python_minor_version_said_in_one_line() -> None:
    plan = _plan({}, "3.12", _dist("numpy", "1.26.4", pure=False), _dist("tqdm", "4.0"))
    diff(plan)
    with pytest.raises(TorchxNbError) as e:
        check_python(plan)
    assert str(e.value).startswith(
        "image base:1 has Python 3.12 and this kernel 3.11: the binary wheels of numpy need"
        " the same minor version; use an image with Python 3.11, or pass --packages none"
    )
    pure_only = _plan({}, "3.12", _dist("tqdm", "4.0"))
    diff(pure_only)
    check_python(pure_only)  # pure wheels install on any Python 3
    no_python = _plan({}, None, _dist("tqdm", "4.0"))
    diff(no_python)
    with pytest.raises(TorchxNbError, match="has no Python 3 to add tqdm to"):
        check_python(no_python)


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("x; rm -rf /", "1.0"),
        ("../../etc", "1.0"),
        ("ok", "1.0/../../x"),
        ("a$(id)", "1"),
        ("", "1"),
    ],
)
def test_hostile_names_and_versions_are_refused_in_one_line(name: str, version: str) -> None:
    with pytest.raises(TorchxNbError) as e:
        check_pin(name, version, "requirements.txt")
    assert "\n" not in str(e.value) and "not a valid name and version" in str(e.value)


def test_pip_configuration_is_read_as_pip_ranks_it_and_credentials_are_masked() -> None:
    listing = (
        "global.index-url='https://user:s3cret@idx.example/simple'\n"
        "global.find-links='/opt/wheels'\n"
        ":env:.find-links='/srv/w1 /srv/w2'\n"
        "global.extra-index-url='file:///a/simple file:///b/simple'\n"
        "global.constraint='/etc/c.txt'\n"
        "garbage line\n"
    )
    values = _parse(listing)
    assert values == {
        "index-url": "https://user:s3cret@idx.example/simple",
        "find-links": "/srv/w1 /srv/w2",
        "extra-index-url": "file:///a/simple file:///b/simple",
    }
    settings = IndexSettings(values["index-url"], ("file:///a/simple",), ("/srv/w1",))
    assert settings.describe() == (
        "https://****@idx.example/simple, file:///a/simple, find-links /srv/w1"
    )
    env = settings.uv_env({})
    assert env["UV_INDEX_URL"] == "https://user:s3cret@idx.example/simple"
    assert env["UV_EXTRA_INDEX_URL"] == "file:///a/simple" and env["UV_FIND_LINKS"] == "/srv/w1"
    assert env["UV_INDEX_STRATEGY"] == "unsafe-best-match"
    assert settings.uv_args() == []
    assert (
        mask_url("see http://tok@h/x and https://a:b@c/")
        == "see http://****@h/x and https://****@c/"
    )


def test_packages_option_names_the_fix(tmp_path: Path) -> None:
    assert check_packages_option(" Auto ") == "auto" and check_packages_option("none") == "none"
    with pytest.raises(TorchxNbError, match="no such file; use auto, none, or a requirements.txt"):
        check_packages_option(str(tmp_path / "missing.txt"))
    (tmp_path / "env.yml").write_text("")
    with pytest.raises(
        TorchxNbError, match="give a requirements.txt, a pyproject.toml or a uv.lock"
    ):
        check_packages_option(str(tmp_path / "env.yml"))


def test_a_uv_lock_is_taken_as_pinned_and_a_requirements_file_is_resolved(
    tmp_path: Path, kernel_venv: KernelVenv
) -> None:
    lock = tmp_path / "uv.lock"
    lock.write_text(
        'version = 1\n[[package]]\nname = "proj"\nversion = "0.1"\nsource = { virtual = "." }\n'
        'dependencies = [{ name = "tnbserved" }]\n'
        '[[package]]\nname = "tnbserved"\nversion = "1.0"\nsource = { registry = "x" }\n'
    )
    assert pins_from_file(str(lock), None, IndexSettings()) == [FilePin("tnbserved", "1.0")]
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("tnbserved<1.0\n")
    index = IndexSettings(no_index=True, find_links=(str(kernel_venv.served),))
    contents = ImageContents("3.11", "/usr", ())
    assert pins_from_file(str(reqs), contents, index) == [FilePin("tnbserved", "0.9")]
    reqs.write_text("nosuchdist-tnb==3\n")
    with pytest.raises(TorchxNbError, match="cannot resolve its requirements"):
        pins_from_file(str(reqs), contents, index)


def test_modules_nothing_installed_provides_are_warned_about(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchx_nb.environment.plan import plan_environment
    from torchx_nb.specs.program import CellProgram

    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "tnbloose.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(loose))
    ws = tmp_path / "ws"
    ws.mkdir()
    image = ImageContents("3.11", "/usr", ("/usr/lib/python3/dist-packages",))
    plan = plan_environment(
        CellProgram("import tnbloose\nimport tnbnowhere\n"), str(ws), "base:1", lambda: image
    )
    assert plan is not None and plan.add == []
    assert plan.warnings == [
        "module 'tnbnowhere' (cell line 2) is neither in this kernel nor in base:1: the job will"
        " fail to import it",
        f"module 'tnbloose' (cell line 1) comes from {loose / 'tnbloose.py'}, which no installed"
        " distribution lists: it does not travel; ship it in the workspace",
    ]


def test_pip_settings_from_its_variables_alone_are_what_pip_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no configuration file for pip to read (``PIP_CONFIG_FILE`` set to the null device
    turns them all off), its settings are read from its ``PIP_*`` variables without starting
    pip: the same as ``pip config list`` gives."""
    import os
    import subprocess
    import sys

    from torchx_nb.environment import pip_config as index

    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", "https://user:tok@idx.example/simple")
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "file:///x/simple file:///y/simple")
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/a")
    monkeypatch.setenv("PIP_NO_INDEX", "0")
    cli = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    ).stdout
    started: list[object] = []
    monkeypatch.setattr(index.subprocess, "run", lambda *a, **k: started.append(a))
    settings = index.kernel_index()
    assert started == []
    assert index._parse(cli) == index._parse(index._variables_listing())
    assert settings == IndexSettings(
        "https://user:tok@idx.example/simple",
        ("file:///x/simple", "file:///y/simple"),
        ("/srv/a",),
        no_index=False,
    )
